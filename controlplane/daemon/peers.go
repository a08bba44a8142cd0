package daemon

import (
	"bytes"
	"encoding/json"
	"slices"
	"sync"
	"time"

	"mesh/controlplane/replication"
	"mesh/controlplane/state"
)

// The control nodes accept each other's routes and Raft connections by the pins of
// their TLS keys, recorded in the replicated state when each was admitted
// (docs/decisions/0014). Every leaf of the mesh CA is good for ten years: without
// pins, a control node removed from the mesh could route back in and speak Raft as
// the leader.

// clusterPins returns the pins routes and Raft accept, or nil to accept every leaf
// of the mesh CA: before the state names any control node (a node that is joining
// and has not caught up), or while an active node has no pin recorded (it joined
// before pins were), since checking an incomplete list would cut it off.
func clusterPins(s *state.State) []string {
	pins, unpinned := s.ControlPins()
	if len(pins) == 0 || len(unpinned) > 0 {
		return nil
	}
	return pins
}

// peerAllowed is the Raft transport's check of a peer's pin, asked at every
// handshake.
func (d *Daemon) peerAllowed(pin string) bool {
	var pins []string
	var version uint64
	d.fsm.Read(func(s *state.State) { pins, version = clusterPins(s), s.MembershipVersion })
	if pins == nil || slices.Contains(pins, pin) || d.ahead.allows(pin, version) {
		return true
	}
	// The log's tail may admit it: read, once, in the background (logAhead). Raft
	// tries the peer again within its heartbeat.
	if d.tail.Load() != nil {
		d.aheadOnce.Do(func() { go d.logAhead() })
	}
	return false
}

// clusterPeers returns the pins routes accept and the cluster addresses of the
// other active control nodes, which this node's broker routes to.
func (d *Daemon) clusterPeers() (pins, routes []string) {
	d.fsm.Read(func(s *state.State) {
		pins = clusterPins(s)
		for _, c := range s.ActiveControlNodes() {
			if c.ID != d.cfg.Node {
				routes = append(routes, c.Cluster)
			}
		}
	})
	return pins, routes
}

// updateClusterPeers makes the broker and Raft follow a change of the control
// nodes: a removed node's routes and Raft connections are closed, a new node's
// accepted and its route solicited.
func (d *Daemon) updateClusterPeers() {
	pins, routes := d.clusterPeers()
	if err := d.broker.SetClusterPeers(pins, routes); err != nil {
		d.log.Error("the broker's routes do not follow the control nodes' change", "err", err)
	}
	d.raft.DropPeersNotAllowed()
}

// closeRemovedOperators closes the operators' connections this node's broker holds
// with the operator credentials of a removed control node. The broker checks
// credentials at a login and on a reload of its options, never in between: such a
// connection opened before the removal kept every right of an operator (every
// change, and every operator's answers on _INBOX.>) until a reload came, and the
// reload of the routes' change (updateClusterPeers) does not come when neither the
// pins nor the routes change. Closed, the credentials log in again into the
// retired account, with the reads only.
func (d *Daemon) closeRemovedOperators() {
	n, err := d.broker.KickOperators(func(key string) bool {
		_, removed := d.fsm.OperatorRevoked(key)
		return removed
	})
	switch {
	case err != nil:
		d.log.Error("the connections of a removed control node's operator credentials could not be listed; they keep an operator's rights until they close (restarting this control node closes them)", "err", err)
	case n > 0:
		d.log.Info("closed the connections of a removed control node's operator credentials; they may log in again to read only", "connections", n)
	}
}

// closeRevokedOperators closes the connections this node's broker holds with
// operator credentials revoked by name (meshctl operator revoke): nats-server checks
// credentials at login and at a reload only, and a connection made before keeps
// every right of the operators' account until something closes it. The login that
// follows is refused (authn.ErrOperatorRevoked).
func (d *Daemon) closeRevokedOperators() {
	n, err := d.broker.KickOperators(func(key string) bool { return d.fsm.OperatorStanding(key) == state.OperatorRevokedByName })
	switch {
	case err != nil:
		d.log.Error("the connections of revoked operator credentials could not be listed; they keep an operator's rights until they close (restarting this control node closes them)", "err", err)
	case n > 0:
		d.log.Info("closed the connections of revoked operator credentials", "connections", n)
	}
}

// warnUnpinned tells the operator, at start, that routes and Raft take any leaf of
// the mesh CA because a control node has no pin recorded.
func (d *Daemon) warnUnpinned() {
	var unpinned []string
	d.fsm.Read(func(s *state.State) { _, unpinned = s.ControlPins() })
	if len(unpinned) > 0 {
		d.log.Warn("some control nodes joined before the mesh recorded their TLS keys: routes and Raft accept any certificate of the mesh CA, and removing a control node cannot shut its certificate out. "+
			"Join each of them again (meshctl control remove, then a new control token and meshctl join on a fresh data directory) to record it",
			"nodes", unpinned)
	}
}

// A node whose state lags the mesh (restarted, its newest entries not yet known to
// be committed; or down while a control node joined) does not list every current
// member, and would refuse the very peers that bring it up to date: a cluster
// restarted at once could find no quorum that accepts itself. What it learns ahead
// of its state widens what it accepts until its state catches up
// (docs/decisions/0015):
//
//   - from its own log (logAhead): the state its log's tail leads to, committed or
//     not, as Raft takes the newest configuration from its log; read once a peer is
//     refused, from what the stores held at start;
//   - from the members it accepts (learnMembers), asked over the Raft port while no
//     leader talks to it: each answers with the members its own state lists.
//
// It only ever widens the list by members a member this node accepts vouches for,
// and only while this node's state is behind what was learnt (by membership
// version): the removal of a member still takes effect when this node applies it.

// membersAnswer is a control node's answer to another's AskMembers: its state's
// membership version, the pins routes and Raft accept (none when it checks none),
// and the other members' Raft addresses, to ask in turn.
type membersAnswer struct {
	Version uint64   `json:"version"`
	Pins    []string `json:"pins,omitempty"`
	Raft    []string `json:"raft,omitempty"`
}

// aheadView is the newest membership learnt ahead of this node's state.
type aheadView struct {
	mu   sync.Mutex
	seen membersAnswer
}

// offer keeps a, if it is newer than what the view holds and names pins, and reports
// whether it did.
func (v *aheadView) offer(a membersAnswer) bool {
	if len(a.Pins) == 0 {
		return false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if a.Version <= v.seen.Version {
		return false
	}
	v.seen = a
	return true
}

// allows reports whether pin is a member in what was learnt, when that is newer
// than the state's membership version.
func (v *aheadView) allows(pin string, stateVersion uint64) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.seen.Version > stateVersion && slices.Contains(v.seen.Pins, pin)
}

// raftAddrs is the Raft addresses learnt ahead of the state.
func (v *aheadView) raftAddrs() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.seen.Raft)
}

// clear forgets what was learnt, once the state is current, and reports whether
// there was anything to forget.
func (v *aheadView) clear() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	had := v.seen.Version > 0
	v.seen = membersAnswer{}
	return had
}

// membersOf is the answer a state gives.
func membersOf(s *state.State) membersAnswer {
	a := membersAnswer{Version: s.MembershipVersion, Pins: clusterPins(s)}
	for _, c := range s.ActiveControlNodes() {
		a.Raft = append(a.Raft, c.Raft)
	}
	return a
}

// answerMembers is this node's answer to a peer's AskMembers.
func (d *Daemon) answerMembers() []byte {
	var a membersAnswer
	d.fsm.Read(func(s *state.State) { a = membersOf(s) })
	data, _ := json.Marshal(a)
	return data
}

// keepTail keeps what the stores held beyond the snapshot at start, for logAhead.
func (d *Daemon) keepTail(tail replication.LogTail) { d.tail.Store(&tail) }

// logAhead learns the membership the log's tail (kept at start) leads to. It runs
// only once a peer was refused: a restart whose peers are all in the state reads
// nothing (at 10,000 hosts the tail holds up to thousands of status batches). Most
// tails hold no control node's admission: the snapshot is not restored twice for
// them.
func (d *Daemon) logAhead() {
	tail := d.tail.Load()
	if tail == nil {
		return
	}
	start := time.Now()
	entries, admits := 0, false
	for l := range tail.Entries {
		entries++
		if admitsControl(l.Data) {
			admits = true
			break
		}
	}
	if !admits {
		d.log.Info("a peer was refused; the Raft log's newest entries admit no control node", "entries", entries, "took", time.Since(start).Round(time.Millisecond))
		return
	}
	fsm, err := tail.Restore()
	if err != nil {
		d.log.Warn("could not read the Raft log's newest entries ahead of the state; the control nodes they admit are accepted once they commit", "err", err)
		return
	}
	for l := range tail.Entries {
		fsm.Apply(l)
	}
	ahead, ok := fsm.(*state.FSM)
	if !ok {
		return
	}
	var a membersAnswer
	ahead.Read(func(s *state.State) { a = membersOf(s) })
	if d.ahead.offer(a) {
		d.log.Info("learnt of control nodes ahead of this node's state from its own log; accepting them until it catches up",
			"membership_version", a.Version, "took", time.Since(start).Round(time.Millisecond))
	}
}

// admitsControl reports whether a log entry's command admits a control node. The
// byte search spares decoding the many entries that do not.
func admitsControl(data []byte) bool {
	if !bytes.Contains(data, []byte(`"role":"`+state.RoleControl+`"`)) {
		return false
	}
	var c struct {
		Op    string `json:"op"`
		Enrol *struct {
			Role string `json:"role"`
		} `json:"enrol"`
	}
	return json.Unmarshal(data, &c) == nil && c.Op == state.OpEnrol && c.Enrol != nil && c.Enrol.Role == state.RoleControl
}

// learnMembers asks the other members this node accepts, and those learnt ahead of
// its state, which members they accept, and keeps the newest answer ahead of its
// state. It asks them at once, each under membersAskTimeout.
func (d *Daemon) learnMembers() {
	var version uint64
	var addrs []string
	var own string
	d.fsm.Read(func(s *state.State) {
		version = s.MembershipVersion
		for _, c := range s.ActiveControlNodes() {
			addrs = append(addrs, c.Raft)
		}
		if c, ok := s.ControlNodes[d.cfg.Node]; ok {
			own = c.Raft
		}
	})
	addrs = append(addrs, d.ahead.raftAddrs()...)
	slices.Sort(addrs)
	addrs = slices.Compact(addrs)
	var wg sync.WaitGroup
	for _, addr := range addrs {
		if addr == own || addr == d.cfg.RaftListen {
			continue
		}
		wg.Go(func() {
			data, err := d.raft.AskMembers(addr, membersAskTimeout)
			if err != nil {
				return
			}
			var a membersAnswer
			if json.Unmarshal(data, &a) != nil || a.Version <= version {
				return
			}
			if d.ahead.offer(a) {
				d.log.Info("learnt of control nodes ahead of this node's state; accepting them until it catches up",
					"from", addr, "membership_version", a.Version, "state_version", version)
			}
		})
	}
	wg.Wait()
}

// membersAskTimeout bounds one AskMembers.
const membersAskTimeout = 2 * time.Second

// forgetAhead forgets what was learnt ahead of the state, now current, and closes the
// Raft connections the state does not allow: a member learnt from an uncommitted
// entry that a new leader replaced, or one a member vouched for that the state
// does not list.
func (d *Daemon) forgetAhead() {
	if d.ahead.clear() {
		d.raft.DropPeersNotAllowed()
	}
}
