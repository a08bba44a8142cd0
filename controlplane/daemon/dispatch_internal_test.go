package daemon

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// Close waits for the handlers under way, and none starts once it waits: before,
// a sync or an enrolment still running went on using Raft and the store after
// Close had closed them.
func TestCloseWaitsForTheHandlersUnderWay(t *testing.T) {
	var hs handlers
	release := make(chan struct{})
	var started, finished atomic.Int32
	h := hs.concurrently(2, func(*nats.Msg) {
		started.Add(1)
		<-release
		finished.Add(1)
	})
	h(&nats.Msg{})
	h(&nats.Msg{})
	for started.Load() < 2 {
		time.Sleep(time.Millisecond)
	}

	waited := make(chan struct{})
	go func() {
		hs.wait()
		close(waited)
	}()
	select {
	case <-waited:
		t.Fatal("wait returned while two handlers were still running")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		t.Fatal("wait did not return after the handlers did")
	}
	if n := finished.Load(); n != 2 {
		t.Fatalf("%d handlers finished before wait returned, want 2", n)
	}

	// A message nats.go delivers after Close began is not handled, and takes no slot.
	for range 3 {
		h(&nats.Msg{})
	}
	time.Sleep(20 * time.Millisecond)
	if n := started.Load(); n != 2 {
		t.Fatalf("%d handlers started, want no new one once closing", n)
	}
}
