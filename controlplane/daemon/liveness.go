package daemon

import (
	"maps"
	"slices"
	"sync"
	"time"

	"mesh/controlplane/state"
)

// liveness remembers when each node was last heard from. It is the leader's memory,
// not replicated: a new leader learns it again within a heartbeat. It is the fallback
// behind the brokers' own view (presence): a connection that is open on a broker but
// silent (half-open, its host gone without a reset) is offline after OfflineAfter.
type liveness struct {
	mu   sync.Mutex
	last map[string]time.Time
	// leading is when this node last became the leader (zero: not since it
	// started): it has heard the nodes' reports only since then. Kept as read, with
	// its monotonic reading, as the reports' times are: compared as wall-clock
	// numbers, a clock stepped back after a takeover would count a silent node alive
	// for as long as the step.
	leading time.Time
	// putBacks is what each node's agent last reported of the managed files it put
	// back as declared (notePutBack), for operators; nodes that reported none are
	// absent.
	putBacks map[string]putBack
}

// putBack is a node's report of the files its agent put back since it started.
type putBack struct {
	count uint64
	at    time.Time // the last time, by the host's clock (never after the report came)
}

// tookOver records that this node became the leader at t.
func (l *liveness) tookOver(t time.Time) {
	l.mu.Lock()
	l.leading = t
	l.mu.Unlock()
}

// since returns when this node last became the leader (zero: not since it started).
func (l *liveness) since() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.leading
}

func newLiveness() *liveness {
	return &liveness{last: map[string]time.Time{}, putBacks: map[string]putBack{}}
}

// notePutBack records a node's report of the files its agent put back: count since
// the agent started (0 forgets what an earlier run reported), the last at at.
func (l *liveness) notePutBack(node string, count uint64, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if count == 0 {
		delete(l.putBacks, node)
		return
	}
	l.putBacks[node] = putBack{count: count, at: at}
}

// putBackOf returns what node last reported of the files its agent put back.
func (l *liveness) putBackOf(node string) (putBack, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.putBacks[node]
	return p, ok
}

func (l *liveness) mark(node string, t time.Time) {
	if node == "" {
		return
	}
	l.mu.Lock()
	l.last[node] = t
	l.mu.Unlock()
}

func (l *liveness) get(node string) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.last[node]
	return t, ok
}

func (l *liveness) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.last)
}

// nodes returns the nodes heard from.
func (l *liveness) nodes() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Collect(maps.Keys(l.last))
}

func (l *liveness) forget(node string) {
	l.mu.Lock()
	delete(l.last, node)
	delete(l.putBacks, node)
	l.mu.Unlock()
}

// alive reports whether node n counts as alive at now: it holds a connection on some
// broker of the mesh, as nats-server announced it, and, on the leader, has not been
// silent, since this control node started hearing from it, for longer than
// OfflineAfter or three of the report intervals its agent says it has, whichever is
// longer (an agent run with --heartbeat 1m was shown offline between its reports
// under the default 45 s). A host whose connection closes is offline at once, on
// every control node.
//
// A follower hears no reports (the leader handles them): the brokers' view is all it
// has, and a node it counted offline for its silence would be offline in the
// follower's mesh_nodes while alive in meshctl nodes, which the leader answers.
func (d *Daemon) alive(n *state.Node, now time.Time) bool {
	if n.Revoked || d.presence.Open(n.PublicKey) == 0 {
		return false
	}
	if !d.raft.IsLeader() {
		return true
	}
	from, heard := d.seen.get(n.ID)
	if !heard {
		// Connected, and not heard from since this control node started: its next
		// report is due within a heartbeat.
		from, _ = d.presence.Since(n.PublicKey)
	}
	// Nor is a node silent for the time this node did not lead.
	if lead := d.seen.since(); !lead.IsZero() && from.Before(lead) {
		from = lead
	}
	return now.Sub(from) <= max(d.opts.OfflineAfter, 3*time.Duration(n.Applied.HeartbeatSeconds)*time.Second)
}
