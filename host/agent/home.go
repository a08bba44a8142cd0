package agent

import (
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// maxHomeWait bounds how rarely the agent looks for its first broker again after
// moves that did not end there (a broker still down, or full).
const maxHomeWait = time.Hour

// homing brings the agent back to the first broker in its order (its home: the
// brokers are rotated by the node id, so that a fleet spreads over them) after it
// failed over to another. nats.go never moves back on its own, so without this a
// control node restarted ends up holding none of its hosts, and another all of them
// (docs/operations.md, "A control node's capacity").
type homing struct {
	every time.Duration // how often to look while away; 0: never
	wait  time.Duration // the current interval: doubles while moves fail, up to maxHomeWait
	// target is the broker the next reconnection attempt goes to, once (nil: none
	// asked). nats.go reads it from its reconnecting goroutine.
	target atomic.Pointer[string]
}

func newHoming(every time.Duration) *homing {
	return &homing{every: every, wait: every}
}

// interval is when to look next: drawn from the upper half of the current wait, so
// that a fleet moved off a control node does not come back in one burst.
func (h *homing) interval() time.Duration {
	if h.every <= 0 {
		return 0
	}
	return h.wait/2 + rand.N(h.wait/2+1)
}

// look is one check, with home (the first broker of the agent's order now: the
// mesh's list changes when control nodes are added or removed), the connection's
// broker and its pool. It says whether to reconnect now, to home. At home, the
// interval goes back to its start; away, with home in the pool, the agent moves, and
// the interval doubles until a check finds it home.
func (h *homing) look(home, connected string, pool []string) bool {
	if connected == home {
		h.wait = h.every
		return false
	}
	if connected == "" || !slices.Contains(pool, home) {
		return false
	}
	h.wait = min(2*h.wait, maxHomeWait)
	h.target.Store(&home)
	return true
}

// arrived is told of each connection made, with home and the broker connected to:
// a move that ended home brings the interval back to its start. It doubled at each
// move, whether or not the move ended there, and went back only when a later look
// found the agent home: displaced again before that look (a rolling restart of its
// home), a host stayed away for up to the doubled wait, an hour at most (audit of
// the control plane's weeks, finding 6). It says whether the interval changed, for
// the timer to be set again.
func (h *homing) arrived(home, connected string) bool {
	if home == "" || connected != home || h.wait == h.every {
		return false
	}
	h.wait = h.every
	return true
}

// pick is nats.go's ReconnectToServer callback: the broker look asked for, for the
// attempt that follows, and nats.go's own choice otherwise (a broker lost, or home
// refusing).
func (h *homing) pick(servers []nats.Server, _ nats.ServerInfo) (*nats.Server, time.Duration) {
	target := h.target.Swap(nil)
	if target == nil {
		return nil, 0
	}
	for i := range servers {
		if servers[i].URL != nil && servers[i].URL.String() == *target {
			return &servers[i], 0
		}
	}
	return nil, 0
}
