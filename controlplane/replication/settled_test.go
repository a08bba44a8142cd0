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
	if err := settled(never, 100*time.Millisecond, nil); !errors.Is(err, ErrCommitPending) {
		t.Fatalf("a commit that never returns: %v, want ErrCommitPending", err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("waited %s for a wait of 100ms", waited)
	}
	close(never.answer) // the goroutine waiting on it ends

	// A node tells its log does not return while such a command is unanswered,
	// and no longer once Raft answers it.
	n := &Node{guarded: &guardedStore{}}
	hung := future{answer: make(chan struct{})}
	if err := settled(hung, 10*time.Millisecond, func() func() { return n.stall(time.Now()) }); !errors.Is(err, ErrCommitPending) {
		t.Fatalf("a commit that does not return: %v", err)
	}
	if err := n.LogWriteError(); !errors.Is(err, ErrLogStalled) {
		t.Fatalf("the log while a command goes unanswered: %v, want ErrLogStalled", err)
	}
	close(hung.answer)
	deadline := time.Now().Add(5 * time.Second)
	for n.LogWriteError() != nil && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if err := n.LogWriteError(); err != nil {
		t.Fatalf("the log once Raft answered: %v, want nil", err)
	}

	refused := errors.New("leadership lost")
	answered := future{answer: make(chan struct{}), err: refused}
	close(answered.answer)
	if err := settled(answered, time.Minute, nil); err != refused {
		t.Fatalf("an answer in time: %v, want %v", err, refused)
	}
}
