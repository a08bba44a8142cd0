package daemon

import (
	"context"
	"sync"
	"sync/atomic"

	"mesh/controlplane/state"
)

// effectKind names what an applied command calls for on this control node.
type effectKind int

const (
	// effectKeyring: take up the keyring's signing keys (open a new one sealed to
	// this node, drop a retired one).
	effectKeyring effectKind = iota + 1
	// effectRemoved: this control node was removed from the control plane; stop.
	effectRemoved
	// effectMembership: the control nodes changed: routes and Raft accept the new
	// members' keys only, hosts get the signed list of brokers, and this node's
	// mesh.json lists them for meshctl.
	effectMembership
	// effectBrokers: make this node's mesh.json list the current brokers, should an
	// earlier save have failed (a full disk) or someone have edited the list.
	effectBrokers
	// effectTellBrokers: this node took over as leader: send the hosts the signed
	// list of brokers once. The leader before it may have died between committing a
	// change of control nodes and sending the list (a soak killed it 30 ms after a
	// removal: hosts dialled the removed broker for as long as they stayed
	// connected); hosts take a list of the version they hold as nothing new.
	effectTellBrokers
	// effectPeers: a control node was admitted that lists no broker yet
	// (state.ControlNode.NeverServed): routes and Raft accept its key; hosts and
	// mesh.json learn of it once it serves (effectMembership).
	effectPeers
	// effectOperatorsRemoved: a control node was removed: the operators'
	// connections this node's broker holds with its operator credentials are closed
	// (they log in again with the reads only, decision 0014).
	effectOperatorsRemoved
	// effectOperatorsRevoked: operator credentials were revoked by name: the
	// connections this node's broker holds with them are closed.
	effectOperatorsRevoked
	// effectBackup: a revocation (of nodes, of operator credentials, a control
	// node's removal) or a token's cancellation was applied: a backup is taken soon,
	// since one from before it restores a control plane that admits what was
	// revoked or cancelled.
	effectBackup
)

type effect struct {
	kind effectKind
}

// effectQueue hands effects from Raft's apply goroutine to the effects actor without
// ever blocking the former. Effects queued before the daemon finished opening are
// those of replayed log entries; they are dropped when the actor starts, because
// opening already did what they ask (the broker starts with nobody connected, and
// refuses revoked keys; the signing keys and removal are checked at open).
type effectQueue struct {
	mu     sync.Mutex
	items  []effect
	ready  chan struct{} // signalled when items were added
	opened atomic.Bool
}

func newEffectQueue() *effectQueue { return &effectQueue{ready: make(chan struct{}, 1)} }

func (q *effectQueue) push(e effect) {
	if !q.opened.Load() {
		return // replayed at start: opening covers it
	}
	q.mu.Lock()
	q.items = append(q.items, e)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

func (q *effectQueue) take() []effect {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.items
	q.items = nil
	return out
}

// runEffects is the actor that carries out applied commands' effects in order.
func (d *Daemon) runEffects(ctx context.Context) error {
	for {
		for _, e := range d.effects.take() {
			d.carryOut(e)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-d.effects.ready:
		}
	}
}

func (d *Daemon) carryOut(e effect) {
	switch e.kind {
	case effectKeyring:
		if err := d.syncKeys(); err != nil {
			d.log.Error("signing keys not updated after a keyring change", "err", err)
		}
		if d.backups != nil {
			// A backup from before the change restores a control plane that
			// signs with a key, or an epoch, the hosts have left behind.
			d.backups.Soon()
		}
	case effectRemoved:
		d.log.Warn("this control node was removed from the control plane; stopping")
		d.removedOnce.Do(func() { close(d.removed) })
	case effectMembership:
		d.updateClusterPeers()
		d.tellBrokers("control nodes changed; hosts told the brokers")
	case effectPeers:
		d.updateClusterPeers()
	case effectOperatorsRemoved:
		d.closeRemovedOperators()
	case effectBackup:
		if d.backups != nil {
			d.backups.Soon()
		}
	case effectOperatorsRevoked:
		d.closeRevokedOperators()
	case effectTellBrokers:
		d.tellBrokers("a new leader told hosts the brokers")
	case effectBrokers:
		var brokers []string
		d.fsm.Read(func(s *state.State) { _, brokers = s.Membership() })
		d.saveBrokers(brokers)
		d.recordServed()
	}
}
