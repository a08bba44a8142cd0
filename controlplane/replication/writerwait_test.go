package replication

import (
	"errors"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/datadir"
)

// TestAWriterDoesNotWaitForRaftsStoreForGood: with the data directory's lock file
// replaced (a review: another mesh's declaration did it), a second serve got past
// that lock and waited on raft.db's for good, saying nothing. A writer waits a
// bounded time, then is refused as a directory in use (exit 8), naming the file.
func TestAWriterDoesNotWaitForRaftsStoreForGood(t *testing.T) {
	dir := t.TempDir()
	first, err := openBolt(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	start := time.Now()
	second, err := openBoltWith(dir, boltAccess{wait: 300 * time.Millisecond})
	if err == nil {
		second.Close()
		t.Fatal("a second writer opened raft.db while the first holds it")
	}
	if !errors.Is(err, datadir.ErrInUse) || !strings.Contains(err.Error(), "stop it, then start this again") || time.Since(start) > 10*time.Second {
		t.Fatalf("a second writer: %v after %s, want in use, at once after its wait", err, time.Since(start))
	}
}

// TestServesOpenOfRaftsStoreWaitsABoundedTime: serve's own open (openBolt) gives up
// after writerLockWait, as the bounded wait above does; it waited for good.
func TestServesOpenOfRaftsStoreWaitsABoundedTime(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first, err := openBolt(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	done := make(chan error, 1)
	go func() {
		second, err := openBolt(dir)
		if err == nil {
			second.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, datadir.ErrInUse) {
			t.Fatalf("a second serve's open: %v, want in use", err)
		}
	case <-time.After(writerLockWait + 15*time.Second):
		t.Fatalf("a second serve's open still waits after %s", writerLockWait+15*time.Second)
	}
}
