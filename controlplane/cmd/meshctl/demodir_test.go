package main

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A demo that a signal stops and that does not return within the grace (a mint
// waiting for its answer, say) made the command exit with its deferred removal never
// run: the temporary directory, with the demo mesh's CA key in it, stayed.
func TestADemoThatDoesNotStopInTimeStillRemovesItsDirectory(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "demo")
	sctx, cancel := context.WithCancelCause(context.Background())
	written := make(chan struct{})
	never := make(chan struct{})
	t.Cleanup(func() { close(never) })
	done := make(chan error, 1)
	go func() {
		done <- demoIn(sctx, io.Discard, dir, false, func(dir string) error {
			if err := os.MkdirAll(filepath.Join(dir, "cp"), 0o700); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, "cp", "ca.key"), []byte("secret"), 0o600); err != nil {
				return err
			}
			close(written)
			<-never // stands for a call that does not see the signal
			return nil
		})
	}()
	<-written
	cancel(&interruptedError{sig: syscall.SIGINT})
	var err error
	select {
	case err = <-done:
	case <-time.After(interruptGrace + 10*time.Second):
		t.Fatal("the demo did not return after the grace")
	}
	var ie *interruptedError
	if !errors.As(err, &ie) {
		t.Fatalf("err = %v, want the signal's", err)
	}
	if _, statErr := os.Stat(dir); !errors.Is(statErr, os.ErrNotExist) {
		t.Fatalf("the demo's directory is still there (%v) after it exited", statErr)
	}
}

// Run to the end, the demo removes its directory, and with --keep it keeps it and
// says where it is.
func TestADemoRemovesOrKeepsItsDirectory(t *testing.T) {
	for _, keep := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "demo")
		var out strings.Builder
		err := demoIn(context.Background(), &out, dir, keep, func(dir string) error {
			return os.MkdirAll(filepath.Join(dir, "cp"), 0o700)
		})
		if err != nil {
			t.Fatal(err)
		}
		_, statErr := os.Stat(dir)
		if keep && (statErr != nil || !strings.Contains(out.String(), dir)) {
			t.Fatalf("--keep: stat %v, output %q", statErr, out.String())
		}
		if !keep && !errors.Is(statErr, os.ErrNotExist) {
			t.Fatalf("without --keep the directory is still there (%v)", statErr)
		}
	}
}
