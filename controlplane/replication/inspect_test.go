package replication

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"mesh/controlplane/datadir"
)

// treeState is every path under dir with its size, mode and modification time.
func treeState(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		out = append(out, fmt.Sprintf("%s %d %v %d", p, fi.Size(), fi.Mode(), fi.ModTime().UnixNano()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// servedStores runs a one-voter member that applies p1..p3, snapshots (snapshots
// times), applies p4 and p5, and stops: its raft directory.
func servedStores(t *testing.T, snapshots int) string {
	t.Helper()
	ca := newCA(t, "mesh")
	cfg := Config{Dir: t.TempDir(), ID: "cp-1", Bind: freeAddr(t), TLS: leafConfig(t, ca), FSM: &probeFSM{},
		EmptyFSM: func() raft.FSM { return &probeFSM{} }, Logger: slog.New(slog.DiscardHandler),
		Timeouts: Timeouts{Heartbeat: 100 * time.Millisecond, SnapshotThreshold: 1 << 20, SnapshotInterval: time.Hour}}
	n := startLeader(t, cfg)
	for i := range 3 {
		probe(t, n, fmt.Sprintf("p%d", i+1))
		if i >= 3-snapshots {
			// Every entry before it applied first: under -race the snapshot was
			// taken at the index of the one before ("nothing new to snapshot").
			if err := n.raft.Barrier(5 * time.Second).Error(); err != nil {
				t.Fatal(err)
			}
			if err := n.raft.Snapshot().Error(); err != nil {
				t.Fatal(err)
			}
		}
	}
	probe(t, n, "p4")
	probe(t, n, "p5")
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	return cfg.Dir
}

// TestInspectReadsTheStateWithoutWriting: Inspect of a stopped member's stores gives
// the log's bounds and terms, the snapshot Raft restores, the members, and a state
// machine holding the snapshot and the commands logged after it (p1..p3 restored,
// p4 and p5 applied), and changes nothing in the directory: raft.db is opened
// read-only, and the snapshots are read without raft's file store, whose opening
// writes a file to test it can (and makes snapshots/ where it is missing).
func TestInspectReadsTheStateWithoutWriting(t *testing.T) {
	t.Parallel()
	dir := servedStores(t, 1)
	before := treeState(t, dir)
	in, err := Inspect(dir, "cp-1", "", func() raft.FSM { return &probeFSM{} }, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := in.State.(*probeFSM).list(); !slices.Equal(got, []string{"p1", "p2", "p3", "p4", "p5"}) {
		t.Errorf("the state read holds %v, want p1..p5", got)
	}
	if in.Snapshot == nil || in.Commands != 2 || in.Applied != in.LastIndex || in.LastIndex != in.Snapshot.Index+2 {
		t.Errorf("snapshot %+v, %d commands after it, applied %d, last index %d: want the snapshot, p4 and p5 after it, up to the last", in.Snapshot, in.Commands, in.Applied, in.LastIndex)
	}
	if in.CurrentTerm == 0 || in.LastTerm != in.CurrentTerm || in.FirstIndex != 1 {
		t.Errorf("first index %d, last term %d, current term %d", in.FirstIndex, in.LastTerm, in.CurrentTerm)
	}
	if len(in.Servers) != 1 || in.Servers[0].ID != "cp-1" || in.Servers[0].Suffrage != raft.Voter {
		t.Errorf("members %+v, want cp-1, a voter", in.Servers)
	}
	if in.PassedOver != nil || in.PeersFile {
		t.Errorf("passed over %v, peers file %v", in.PassedOver, in.PeersFile)
	}
	if after := treeState(t, dir); !slices.Equal(before, after) {
		t.Errorf("Inspect changed the directory:\nbefore %v\nafter  %v", before, after)
	}
}

// TestInspectPassesOverATornSnapshot: the newest snapshot's state.bin garbled (its
// checksum no longer matches), Inspect restores the one before it, as Raft does, says
// which it passed over, and the log still gives the whole state.
func TestInspectPassesOverATornSnapshot(t *testing.T) {
	t.Parallel()
	dir := servedStores(t, 2)
	snaps, err := snapshotDirs(dir)
	if err != nil || len(snaps) != 2 {
		t.Fatalf("snapshots %v, %v", snaps, err)
	}
	torn := filepath.Join(dir, "snapshots", snaps[0].name, "state.bin")
	data, err := os.ReadFile(torn)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(torn, data, 0o600); err != nil {
		t.Fatal(err)
	}
	in, err := Inspect(dir, "cp-1", "", func() raft.FSM { return &probeFSM{} }, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if in.PassedOver == nil || in.PassedOver.File != torn {
		t.Errorf("passed over %v, want %s", in.PassedOver, torn)
	}
	if in.Snapshot == nil || in.Snapshot.ID != snaps[1].name {
		t.Errorf("restored %+v, want the older snapshot %s", in.Snapshot, snaps[1].name)
	}
	if got := in.State.(*probeFSM).list(); !slices.Equal(got, []string{"p1", "p2", "p3", "p4", "p5"}) {
		t.Errorf("the state read holds %v, want p1..p5", got)
	}
}

// TestInspectRefusesAStoreInUse: while another open file holds raft.db for writing
// (a serve running on it), Inspect waits as long as it was told, then says the
// store is in use (ErrStoreInUse, a datadir.ErrInUse). Released, it reads.
func TestInspectRefusesAStoreInUse(t *testing.T) {
	t.Parallel()
	dir := makeStores(t, true, 1, 3)
	held, err := raftboltdb.New(raftboltdb.Options{Path: raftDBPath(dir)})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = Inspect(dir, "cp-1", "", func() raft.FSM { return &probeFSM{} }, 200*time.Millisecond)
	if !errors.Is(err, ErrStoreInUse) || !errors.Is(err, datadir.ErrInUse) || !strings.Contains(err.Error(), raftDBPath(dir)) {
		t.Errorf("Inspect of a store open for writing: %v, want ErrStoreInUse naming raft.db", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Inspect waited %s for a wait of 200ms", took)
	}
	if err := held.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Inspect(dir, "cp-1", "", func() raft.FSM { return &probeFSM{} }, 200*time.Millisecond); err != nil {
		t.Errorf("Inspect once the store was closed: %v", err)
	}
}

// TestANamedPipeInTheStoreHoldsNothing (a review's run): a named pipe at
// raft/peers.json or a snapshot's meta.json, in a backup copy `meshctl check` looks
// at, held the reader until a writer came, for good (and serve, at start). The
// peers file is refused as no file; the snapshot passed over as unreadable.
func TestANamedPipeInTheStoreHoldsNothing(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, PeersFile), 0o600); err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(dir, "snapshots", "2-10-1700000000000")
	if err := os.MkdirAll(snap, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(snap, "meta.json"), 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, ok, err := readPeersFile(dir, "cp-1", ""); ok || !errors.Is(err, ErrPeersFile) || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("a named pipe as the peers file: ok %t, %v", ok, err)
		}
		snaps, err := snapshotDirs(dir)
		if err != nil || len(snaps) != 1 || snaps[0].metaReadable {
			t.Errorf("a named pipe as a snapshot's meta.json: %+v, %v; want it unreadable", snaps, err)
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a named pipe in the Raft store holds the reader")
	}
}

// TestInspectRefusesACommandGarbledOnDisk (a walkthrough): a command entry whose
// bytes are no longer JSON (one byte changed in raft.db) passed `meshctl check` as
// "ok", its state a command short of the others' (the state machine skips what does
// not decode). Every leader writes JSON: such an entry is damage, said as such.
func TestInspectRefusesACommandGarbledOnDisk(t *testing.T) {
	t.Parallel()
	dir := servedStores(t, 1)
	store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
	if err != nil {
		t.Fatal(err)
	}
	last, err := store.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	var l raft.Log
	if err := store.GetLog(last, &l); err != nil || l.Type != raft.LogCommand {
		t.Fatalf("the last entry: %+v %v, want a command", l, err)
	}
	l.Data = append([]byte("X"), l.Data[1:]...)
	if err := store.StoreLog(&l); err != nil {
		t.Fatal(err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = Inspect(dir, "cp-1", "", func() raft.FSM { return &probeFSM{} }, time.Second)
	var de *DamageError
	if !errors.As(err, &de) || !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), fmt.Sprintf("entry %d", last)) {
		t.Fatalf("a garbled command: %v, want the damage named at entry %d", err, last)
	}
}
