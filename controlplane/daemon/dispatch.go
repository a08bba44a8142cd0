package daemon

import (
	"sync"

	"github.com/nats-io/nats.go"
)

// handlers runs the API's handlers on goroutines of their own, and lets Close wait
// for those under way before it closes what they use: one still running after Raft
// and the store closed would answer its requester with a shutdown error after the
// daemon said it had stopped, or commit into a store closed under it.
type handlers struct {
	mu      sync.Mutex
	closing bool
	running sync.WaitGroup
}

// concurrently runs h for each message on up to n goroutines at once. nats.go calls
// a subscription's handler one message at a time; a handler that waits on a Raft
// commit (an enrolment) or signs (a sync) would make every other requester queue
// behind it, and Raft batches the commands proposed together into one disk write.
// When n are busy the subscription's own goroutine waits, so the broker's pending
// limits, not an unbounded queue here, absorb a flood. Once the daemon is closing,
// a message nats.go still delivers is dropped: its requester times out and asks
// another control node.
func (hs *handlers) concurrently(n int, h nats.MsgHandler) nats.MsgHandler {
	slots := make(chan struct{}, n)
	return func(m *nats.Msg) {
		slots <- struct{}{}
		hs.start(slots, h, m)
	}
}

// atMost runs h for each message on up to n goroutines at once, as concurrently
// does, but never waits for a slot: a message that finds the n taken goes to busy,
// on the subscription's goroutine, at once.
func (hs *handlers) atMost(n int, h, busy nats.MsgHandler) nats.MsgHandler {
	slots := make(chan struct{}, n)
	return func(m *nats.Msg) {
		select {
		case slots <- struct{}{}:
			hs.start(slots, h, m)
		default:
			busy(m)
		}
	}
}

// start runs h(m) on a goroutine of its own, holding the slot taken in slots until
// it returns; or, once the daemon is closing, gives the slot back and drops m.
func (hs *handlers) start(slots chan struct{}, h nats.MsgHandler, m *nats.Msg) {
	if !hs.begin() {
		<-slots
		return
	}
	go func() {
		defer func() {
			<-slots
			hs.running.Done()
		}()
		h(m)
	}()
}

// begin counts one more handler under way, unless the daemon is closing. The lock
// orders it before wait's: a WaitGroup must not grow from zero while it is waited on.
func (hs *handlers) begin() bool {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.closing {
		return false
	}
	hs.running.Add(1)
	return true
}

// wait refuses any further handler and returns when those under way have returned.
// They finish on their own: Raft is still open, and a commit they wait on answers
// within a fifth more than commitTimeout (replication.ErrCommitPending past it).
func (hs *handlers) wait() {
	hs.mu.Lock()
	hs.closing = true
	hs.mu.Unlock()
	hs.running.Wait()
}
