package daemon

import (
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
}

func newLiveness() *liveness { return &liveness{last: map[string]time.Time{}} }

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

func (l *liveness) forget(node string) {
	l.mu.Lock()
	delete(l.last, node)
	l.mu.Unlock()
}

// alive reports whether node n counts as alive at now: it holds a connection on some
// broker of the mesh, as nats-server announced it, and has not been silent for longer
// than OfflineAfter since this control node started hearing from it. A host whose
// connection closes is offline at once, on every control node.
func (d *Daemon) alive(n *state.Node, now time.Time) bool {
	if n.Revoked || d.presence.Open(n.PublicKey) == 0 {
		return false
	}
	last, heard := d.seen.get(n.ID)
	if !heard {
		// Connected, and not heard from since this control node took over or
		// started: its next report is due within a heartbeat.
		since, _ := d.presence.Since(n.PublicKey)
		return now.Sub(since) <= d.opts.OfflineAfter
	}
	return now.Sub(last) <= d.opts.OfflineAfter
}
