package daemon

import "time"

// isolationGrace is how long a control node must have been cut off (no leader
// heard, too few brokers routed to for a quorum) before its broker sheds its hosts:
// longer than an election among nodes that still reach each other.
const isolationGrace = 4 * time.Second

// isolation decides when this node's broker sends its hosts to the other control
// nodes (docs/decisions/0023-a-cut-off-control-node-sheds-its-hosts.md).
//
// A control node cut off from the others, while its hosts still reach it (a
// partition between control nodes, not between a node and its hosts), keeps them:
// their connections are healthy, so nothing makes them leave, and through a broker
// with no route to the leader they receive no declaration, their syncs and reports
// reach nobody, and the rest of the mesh shows them offline, for as long as the
// partition lasts. Shed, they take the next broker they know, on the side that has a
// leader, and move back to their first broker once it is whole again (decision 0020).
type isolation struct {
	since time.Time // when the node was first seen cut off; zero while it is not
	shed  bool
}

// cutOff says whether a node is on the side of a partition that cannot have a
// leader: it hears none, and the brokers it routes to, with its own, are fewer than
// a quorum of voters. A mesh of one voter is never cut off; a node that routes to
// enough others is not, even without a leader (an election, or Raft's port alone
// blocked: its hosts reach the leader through the routes).
func cutOff(leaderHeard bool, voters, routedPeers int) bool {
	return !leaderHeard && voters > 1 && 1+routedPeers < voters/2+1
}

// observe takes one look and says whether to start shedding the hosts (cut off for
// isolationGrace) or to stop (no longer cut off, after shedding).
func (w *isolation) observe(now time.Time, cut bool) (shed, unshed bool) {
	if !cut {
		unshed = w.shed
		*w = isolation{}
		return false, unshed
	}
	if w.since.IsZero() {
		w.since = now
	}
	if !w.shed && now.Sub(w.since) >= isolationGrace {
		w.shed = true
		return true, false
	}
	return false, false
}
