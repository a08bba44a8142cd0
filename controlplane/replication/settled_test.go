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
