package daemon

import (
	"github.com/nats-io/nats.go"
)

// concurrently runs h for each message on up to n goroutines at once. nats.go calls
// a subscription's handler one message at a time; a handler that waits on a Raft
// commit (an enrolment) or signs (a sync) would make every other requester queue
// behind it, and Raft batches the commands proposed together into one disk write.
// When n are busy the subscription's own goroutine waits, so the broker's pending
// limits, not an unbounded queue here, absorb a flood.
func concurrently(n int, h nats.MsgHandler) nats.MsgHandler {
	slots := make(chan struct{}, n)
	return func(m *nats.Msg) {
		slots <- struct{}{}
		go func() {
			defer func() { <-slots }()
			h(m)
		}()
	}
}
