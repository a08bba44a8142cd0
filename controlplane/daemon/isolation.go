package daemon

import "time"

// isolationGrace is how long a control node that hears no leader and routes to too
// few brokers for a quorum waits before its broker sheds its hosts: no leader can be
// on its side, and an election among the nodes that still reach each other is over
// by then.
const isolationGrace = 4 * time.Second

// strandedGrace is how long a control node that hears no leader, though it routes to
// enough brokers for a quorum, waits before its broker sheds its hosts: a node that
// lost the leader alone (what the leader's machine sends it is lost, say) while the
// others still follow it. NATS routes do not forward from one broker to another, so
// its hosts reach the leader only through a route to the leader's own broker, which
// such a loss closes too. Elections take a few Raft heartbeats; this is many more,
// so that a slow election does not send every host elsewhere.
func strandedGrace(raftHeartbeat time.Duration) time.Duration {
	return max(30*time.Second, 15*raftHeartbeat)
}

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
	since time.Time // when the node was first seen without a leader; zero while it hears one
	shed  bool
}

// cutOff says whether a node that hears no leader is on the side of a partition
// that cannot have one: the brokers it routes to, with its own, are fewer than a
// quorum of voters. A mesh of one voter is never cut off.
func cutOff(voters, routedPeers int) bool {
	return voters > 1 && 1+routedPeers < voters/2+1
}

// observe takes one look: whether the node hears a leader (it leads, or Raft heard
// one lately), the voters of the configuration and the brokers it routes to (for
// cutOff), and stranded, the grace for a node that is not cut off. It says whether to
// start shedding the hosts or to stop (a leader heard again, after shedding, or no
// other control node left to send them to).
//
// A mesh of one voter never sheds, whatever it hears: its hosts have no other
// broker to go to, and a lone node that cannot lead (its disk full) would only
// have them bounce off its handshakes until it leads again.
func (w *isolation) observe(now time.Time, leaderHeard bool, voters, routedPeers int, stranded time.Duration) (shed, unshed bool) {
	if leaderHeard || voters <= 1 {
		unshed = w.shed
		*w = isolation{}
		return false, unshed
	}
	if w.since.IsZero() {
		w.since = now
	}
	alone := now.Sub(w.since)
	if !w.shed && ((cutOff(voters, routedPeers) && alone >= isolationGrace) || alone >= stranded) {
		w.shed = true
		return true, false
	}
	return false, false
}
