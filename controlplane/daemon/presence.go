package daemon

import (
	"context"
	"time"

	"mesh/controlplane/presence"
	"mesh/controlplane/state"
)

// Counters returns what the control plane refused, dropped and disconnected since it
// started (docs/security.md: every refusal is counted).
func (d *Daemon) Counters() Counts { return d.guard.snapshot() }

// connectionKicked is told by the presence tracker of every host connection that a
// broker closed on request ($SYS.REQ.SERVER.<id>.KICK), on any broker. The leader
// asks for it, for a node's budget (its message rate or size, more connections than
// it may hold) or a revocation; the broker that held the connection, this one when
// the event is this broker's, refuses a live node's key for a while (decision 0038:
// authn.Kicked, which passes over revoked keys and enrolling clients'). The leader
// handles every host's messages, from any broker: the cooldown it started on its own
// broker left the one the host flooded through admitting it again 2 ms later (a
// review).
//
// Not while this broker sheds its hosts (decision 0023): it closes every host's
// connection the same way, and its hosts, refused meanwhile anyway, were refused
// again for a while once it admitted them, logged as disconnected for their budget
// (a review).
func (d *Daemon) connectionKicked(user string, c presence.Conn) {
	if c.Server == d.broker.InProcess().ID() && !d.broker.Shedding() {
		d.authn.Kicked(user)
	}
}

// connectionChanged is told by the presence tracker of every host connection that
// opens or closes, on any broker. A node holding more connections than its budget
// has its newest closed, by the leader alone so that it is closed once (and its key
// is then refused for a while by the broker that held it: connectionKicked).
func (d *Daemon) connectionChanged(user string, c presence.Conn, started time.Time, opened bool, open int) {
	if !d.raft.IsLeader() {
		return
	}
	if !opened {
		if open == 0 {
			d.wentOffline(user)
		}
		return
	}
	// A revoked key's connection that raced its revocation is closed as it is
	// announced: the broker refuses the key from the commit on.
	if d.fsm.KeyRevoked(user) {
		d.presence.KickConn(c)
		return
	}
	// A disconnection decided before this connection was announced applies to it
	// only if it was open when the offending message arrived: a node that
	// reconnects afterwards starts afresh.
	if why, due := d.guard.collect(user, started); due {
		d.presence.KickConn(c)
		d.guard.kicked(why)
		return
	}
	if open == 2 {
		// Each agent holds one connection: two are a reconnection whose old
		// connection the broker has not seen end yet, or two machines. Logged at
		// most once an interval, with the count: a fleet reconnecting at once
		// after a network blip would otherwise write a line per host.
		if n, ok := d.fsm.NodeByKey(user); ok {
			if due, count := d.guard.due(DropKey{Subject: "connections", Reason: "two_with_one_key"}); due {
				d.log.Warn("a node holds two connections with its key at once: a reconnection whose old connection has not ended yet (100 s at most), or a second machine holding its key (one cloned after its enrolment: failing key_shared after --shared-key-grace; see operations, Cloned machines)",
					"node", n.ID, "broker", c.Server, "count", count)
			}
		}
	}
	if open <= d.guard.budgets.MaxConnections {
		return
	}
	d.guard.drop("connect", ReasonConnections, user, "more connections than the node's budget; the newest is closed")
	d.presence.KickConn(c)
	d.guard.kicked(ReasonConnections)
}

// presenceResync is how often the tracker re-reads every broker's connection list, to
// repair what a lost event left wrong.
const presenceResync = time.Minute

// syncPresence lists every broker's connections at start, and again every
// presenceResync, or at once when the peer brokers routed to change (watchRoutes).
func (d *Daemon) syncPresence(ctx context.Context) error {
	for {
		var brokers int
		d.fsm.Read(func(s *state.State) { brokers = len(s.ActiveControlNodes()) })
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := d.presence.Sync(sctx, max(1, brokers)); err != nil && ctx.Err() == nil {
			d.log.Warn("not every broker listed its connections; presence may lag until the next listing", "err", err)
		}
		// The accounts of keys no longer trusted hold few connections, each for a
		// minute at most: a listing repairs what a lost event left wrong there too.
		for _, t := range d.shutOut {
			_ = t.Sync(sctx, max(1, brokers))
		}
		d.closeRevokedConnections()
		cancel()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(presenceResync):
		case <-d.peersChanged:
		}
	}
}

// wentOffline records, through the log, when the leader last heard from the node
// whose last connection just closed: the LAST SEEN operators read of an offline
// node after a restart or under a new leader, when no control node remembers
// hearing from it. One entry for many closes (the status batcher's), and none
// per heartbeat.
func (d *Daemon) wentOffline(user string) {
	n, ok := d.fsm.NodeByKey(user)
	if !ok || n.Revoked {
		return
	}
	if last, heard := d.seen.get(n.ID); heard {
		d.status.addSeen(n.ID, user, last.UTC())
	}
}
