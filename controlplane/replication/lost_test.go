package replication

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// listTree is every path under dir (dir itself included), or nil if dir does not
// exist.
func listTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		out = append(out, p)
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// TestLostStateIsRefused: a member that was made one (MustHoldState: serve on a
// bootstrapped or joined node) whose store holds no log entry and no snapshot (raft/
// removed, raft.db removed or emptied, or a fresh raft.db in its place) is refused
// with ErrStateLost, which matches ErrDamaged, naming what is gone, and nothing is
// created. Before, Open started it as a member of no cluster: serve waited a minute
// for a leader ("no known peers, aborting election"), then failed with "a leader
// needs 1 of the 0 voters", having made a fresh raft.db. Without MustHoldState (a
// join's first open) the same stores open as before.
func TestLostStateIsRefused(t *testing.T) {
	for _, c := range []struct {
		name  string
		make  func(t *testing.T) string // returns the raft directory
		names string                    // the path the refusal names, under the directory
	}{
		{"raft/ removed", func(t *testing.T) string { return filepath.Join(t.TempDir(), "raft") }, ""},
		{"raft.db removed", func(t *testing.T) string { return t.TempDir() }, "raft.db"},
		{"raft.db emptied", func(t *testing.T) string {
			dir := t.TempDir()
			if err := os.WriteFile(raftDBPath(dir), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			return dir
		}, "raft.db"},
		{"a fresh raft.db", func(t *testing.T) string {
			dir := t.TempDir()
			bolt, err := raftboltdb.New(raftboltdb.Options{Path: raftDBPath(dir)})
			if err != nil {
				t.Fatal(err)
			}
			bolt.Close()
			return dir
		}, ""},
		{"a term but no entry and no snapshot", func(t *testing.T) string {
			dir := makeStores(t, true, 0, 0)
			os.RemoveAll(filepath.Join(dir, "snapshots"))
			return dir
		}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := c.make(t)
			before := listTree(t, dir)
			_, err := Open(Config{Dir: dir, ID: "cp-1", Bind: freeAddr(t), FSM: &countFSM{}, MustHoldState: true})
			var de *DamageError
			if !errors.Is(err, ErrStateLost) || !errors.Is(err, ErrDamaged) || !errors.As(err, &de) {
				t.Fatalf("Open: %v, want ErrStateLost and ErrDamaged", err)
			}
			if want := filepath.Join(dir, c.names); de.File != want || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "A damaged Raft store") {
				t.Errorf("Open: %v, want it to name %s and the section of docs/operations.md", err, want)
			}
			if after := listTree(t, dir); !slices.Equal(before, after) {
				t.Errorf("the refusal changed the directory: %v, was %v", after, before)
			}
			// A join's first open: nothing to lose yet.
			store, _, err := openStores(dir, hclog.NewNullLogger(), false)
			if err != nil {
				t.Fatalf("without MustHoldState: %v", err)
			}
			if store != nil {
				store.Close()
			}
		})
	}
	// Stores that hold state open, whether from the log or a snapshot alone.
	for name, dir := range map[string]string{
		"log":      makeStores(t, true, 1, 3),
		"snapshot": makeStores(t, true, 0, 0, 5),
	} {
		store, _, err := openStores(dir, hclog.NewNullLogger(), true)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		store.Close()
	}
}
