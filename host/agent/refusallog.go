package agent

import (
	"sync"
	"time"
)

// refusalLogInterval and refusalLinesPerInterval bound the lines of one kind of
// refusal: the first few of each interval are logged, each with what was refused,
// and the first after it says how many were held back. Whoever can put bytes on the
// node's subject (a broker that is not the mesh's, a removed control node) decides
// how many envelopes the agent refuses, and how often its queue is full; every
// refusal is counted in the metrics.
const (
	refusalLogInterval      = 10 * time.Second
	refusalLinesPerInterval = 5
)

// maxRefusalKinds bounds the kinds tracked: the codes are the verifier's few, and a
// kind nobody foresaw shares the window of the others past the bound.
const maxRefusalKinds = 64

// refusalLog decides which refusals are logged. Its zero value is ready. The loop
// asks it about envelopes, nats.go's goroutine about a full queue.
type refusalLog struct {
	mu    sync.Mutex
	kinds map[string]*refusalWindow
}

type refusalWindow struct {
	start      time.Time
	logged     int
	suppressed int
}

// allow reports whether a refusal of kind is logged at now and, if so, how many
// of its kind were held back since the last one logged.
func (r *refusalLog) allow(kind string, now time.Time) (ok bool, suppressed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.kinds == nil {
		r.kinds = map[string]*refusalWindow{}
	}
	w := r.kinds[kind]
	if w == nil {
		if len(r.kinds) >= maxRefusalKinds {
			kind = ""
			w = r.kinds[kind]
		}
		if w == nil {
			r.kinds[kind] = &refusalWindow{start: now, logged: 1}
			return true, 0
		}
	}
	if now.Sub(w.start) < refusalLogInterval {
		if w.logged < refusalLinesPerInterval {
			w.logged++
			return true, 0
		}
		w.suppressed++
		return false, 0
	}
	suppressed = w.suppressed
	*w = refusalWindow{start: now, logged: 1}
	return true, suppressed
}

// heldBack is the attribute of a line that follows lines held back: how many.
func heldBack(n int) []any {
	if n == 0 {
		return nil
	}
	return []any{"suppressed", n}
}
