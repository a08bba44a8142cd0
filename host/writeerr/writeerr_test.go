package writeerr

import (
	"errors"
	"testing"
)

// failing writes after writes, then fails with err.
type failing struct {
	after int
	err   error
}

func (f *failing) Write(p []byte) (int, error) {
	if f.after <= 0 {
		return 0, f.err
	}
	f.after--
	return len(p), nil
}

// TestTheFirstErrorIsKept: writes that succeed keep no error; the first that fails
// is kept, whatever the writes after it return.
func TestTheFirstErrorIsKept(t *testing.T) {
	full, closed := errors.New("no space left on device"), errors.New("file already closed")
	w := &Writer{W: &failing{after: 1, err: full}}
	if _, err := w.Write([]byte("a")); err != nil || w.Err() != nil {
		t.Fatalf("a write that succeeded: %v, kept %v", err, w.Err())
	}
	if _, err := w.Write([]byte("b")); err != full || w.Err() != full {
		t.Fatalf("a write that failed: %v, kept %v", err, w.Err())
	}
	w.W = &failing{err: closed}
	if _, err := w.Write([]byte("c")); err != closed || w.Err() != full {
		t.Fatalf("a later failure: %v, kept %v, want the first (%v)", err, w.Err(), full)
	}
}
