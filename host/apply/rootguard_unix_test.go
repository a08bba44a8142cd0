//go:build unix

package apply

import (
	"context"
	"errors"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestARootThatIsANamedPipeDoesNotHoldTheAgent: os.OpenRoot opens a named pipe as
// any file and waits for a writer: a root that is one (at the start, or swapped in
// later) held agent.New, and would hold every apply, for good. It is refused before
// it is opened: Accept leaves it to statedir.PrepareRoot to say, and an Apply fails
// as for a file (ENOTDIR).
func TestARootThatIsANamedPipeDoesNotHoldTheAgent(t *testing.T) {
	root := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(root, 0o644); err != nil {
		t.Fatal(err)
	}
	g := &RootGuard{}
	done := make(chan error, 2)
	go func() {
		done <- g.Accept(root)
		_, err := FileApplier{Root: root, Guard: g}.Apply(context.Background(), []File{{Path: "f", Data: []byte("x"), Mode: 0o644}}, nil)
		done <- err
	}()
	for i, want := range []error{nil, syscall.ENOTDIR} {
		select {
		case err := <-done:
			if want == nil && err != nil || want != nil && !errors.Is(err, want) {
				t.Fatalf("step %d: %v, want %v", i+1, err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("step %d still waits on the named pipe after 5s", i+1)
		}
	}
}
