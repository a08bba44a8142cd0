package replication

import (
	"errors"
	"testing"
	"time"
)

// future is a raft.Future that answers err once answer is closed.
type future struct {
	answer chan struct{}
	err    error
}

func (f future) Error() error {
	<-f.answer
	return f.err
}

// TestACommitThatDoesNotReturnIsAnswered: Raft's answer to a command is waited
// for a bounded time; one that never comes (a leader whose log write hangs: a
// disk that does not answer) is ErrCommitPending then, where the caller waited for
// good (hashicorp/raft's timeout bounds only its taking the command up). An
// answer in time is passed on as it is.
func TestACommitThatDoesNotReturnIsAnswered(t *testing.T) {
	never := future{answer: make(chan struct{})}
	start := time.Now()
	if err := settled(never, 100*time.Millisecond); !errors.Is(err, ErrCommitPending) {
		t.Fatalf("a commit that never returns: %v, want ErrCommitPending", err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("waited %s for a wait of 100ms", waited)
	}
	close(never.answer) // the goroutine waiting on it ends

	refused := errors.New("leadership lost")
	answered := future{answer: make(chan struct{}), err: refused}
	close(answered.answer)
	if err := settled(answered, time.Minute); err != refused {
		t.Fatalf("an answer in time: %v, want %v", err, refused)
	}
}

// TestALogWriteThatDoesNotReturnIsSaid: a write to the Raft log under way for
// LogWriteHung or more makes the log one that cannot be written (ErrLogStalled),
// which control status, the heartbeats and the check before proposing read; one
// shorter, or none, does not. A commit slow for another reason (followers slow to
// answer) says nothing of this node's log (a review: counting unanswered commits
// blamed a leader whose disk was fine).
func TestALogWriteThatDoesNotReturnIsSaid(t *testing.T) {
	g := &guardedStore{}
	n := &Node{guarded: g}
	if err := n.LogWriteError(); err != nil {
		t.Fatalf("no write under way: %v", err)
	}
	done := g.writing()
	if err := n.LogWriteError(); err != nil {
		t.Fatalf("a write just begun: %v", err)
	}
	g.wmu.Lock()
	g.writesSince = time.Now().Add(-LogWriteHung - time.Second)
	g.wmu.Unlock()
	if err := n.LogWriteError(); !errors.Is(err, ErrLogStalled) {
		t.Fatalf("a write under way for %s: %v, want ErrLogStalled", LogWriteHung+time.Second, err)
	}
	done()
	if err := n.LogWriteError(); err != nil {
		t.Fatalf("once the write returned: %v", err)
	}
}
