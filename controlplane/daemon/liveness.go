package daemon

import (
	"sync"
	"time"
)

// liveness remembers when each node was last heard from. It is the leader's memory,
// not replicated: a new leader learns it again within a heartbeat.
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
