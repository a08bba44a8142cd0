package replication

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// failingCreate is hashicorp/raft's file store failing the way it does on a full
// disk: the temporary directory made, meta.json not written, the directory left.
type failingCreate struct {
	raft.SnapshotStore
	dir string
}

func (f failingCreate) Create(_ raft.SnapshotVersion, index, term uint64, _ raft.Configuration, _ uint64, _ raft.Transport) (raft.SnapshotSink, error) {
	tmp := filepath.Join(f.dir, fmt.Sprintf("%d-%d-%d.tmp", term, index, time.Now().UnixMilli()))
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return nil, err
	}
	return nil, &os.PathError{Op: "write", Path: filepath.Join(tmp, "meta.json"), Err: syscall.ENOSPC}
}

func tmpDirs(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.tmp"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range m {
		m[i] = filepath.Base(m[i])
	}
	return m
}

// TestFailedSnapshotsLeaveNothing: a snapshot that cannot be created (a full disk)
// left its term-index-msec.tmp directory behind, one more at every snapshot
// interval for as long as the disk stayed full, and for good after. The failed
// attempt's directory is removed at once, another snapshot's (of another term and
// index, being written) is not, and what a stopped node left is removed when the
// store is opened.
func TestFailedSnapshotsLeaveNothing(t *testing.T) {
	raftDir := t.TempDir()
	snapDir := filepath.Join(raftDir, "snapshots")
	// Left by a node killed while it wrote a snapshot, or by a failed Create.
	for _, name := range []string{"3-40-1796311050045.tmp", "3-41-1796311050046.tmp"} {
		if err := os.MkdirAll(filepath.Join(snapDir, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s, err := newTidySnapshots(raftDir, 3, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	if left := tmpDirs(t, snapDir); len(left) != 0 {
		t.Fatalf("opening the store left %v", left)
	}

	// Another snapshot being written at the same moment (one a leader sends).
	other := fmt.Sprintf("7-90-%d.tmp", time.Now().UnixMilli())
	if err := os.MkdirAll(filepath.Join(snapDir, other), 0o755); err != nil {
		t.Fatal(err)
	}
	s.SnapshotStore = failingCreate{SnapshotStore: s.SnapshotStore, dir: snapDir}
	for range 3 {
		if _, err := s.Create(raft.SnapshotVersionMax, 100, 7, raft.Configuration{}, 1, nil); !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("Create: %v, want the store's error", err)
		}
	}
	if left := tmpDirs(t, snapDir); !slices.Equal(left, []string{other}) {
		t.Fatalf("after three failed snapshots the directory holds %v, want only the other one being written (%s)", left, other)
	}
}
