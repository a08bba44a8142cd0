package replication

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"mesh/controlplane/state"
)

// recordingFSM is a probeFSM that records, after each command it applies, the ids
// it holds then: the state as of each index.
type recordingFSM struct {
	probeFSM
	mu sync.Mutex
	at map[uint64][]string
}

func (f *recordingFSM) Apply(l *raft.Log) any {
	res := f.probeFSM.Apply(l)
	f.mu.Lock()
	f.at[l.Index] = f.list()
	f.mu.Unlock()
	return res
}

// stateAt is the state as of index: the ids recorded after the last command at or
// before it (entries that are no command change nothing).
func (f *recordingFSM) stateAt(index uint64) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var best uint64
	for i := range f.at {
		if i <= index && i > best {
			best = i
		}
	}
	return f.at[best]
}

// backupCfg is a one-voter member for the backup tests, on a state machine that
// records its states; Raft snapshots only when asked.
func backupCfg(t *testing.T) (Config, *recordingFSM) {
	t.Helper()
	fsm := &recordingFSM{at: map[uint64][]string{}}
	return Config{Dir: t.TempDir(), ID: "cp-1", Bind: freeAddr(t), TLS: leafConfig(t, newCA(t, "mesh")), FSM: fsm,
		EmptyFSM: func() raft.FSM { return &probeFSM{} }, Logger: slog.New(slog.DiscardHandler),
		Timeouts: Timeouts{Heartbeat: 100 * time.Millisecond, SnapshotThreshold: 1 << 20, SnapshotInterval: time.Hour}}, fsm
}

// readVote reads the term and the vote recorded in the raft.db of dir.
func readVote(t *testing.T, dir string) (term, voteTerm uint64, cand []byte) {
	t.Helper()
	s, err := raftboltdb.New(raftboltdb.Options{Path: raftDBPath(dir), BoltOptions: &bbolt.Options{ReadOnly: true, Timeout: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if term, err = s.GetUint64(stableCurrentTerm); err != nil {
		t.Fatalf("%s: no current term: %v", dir, err)
	}
	if voteTerm, err = s.GetUint64(stableLastVoteTerm); err != nil {
		t.Fatalf("%s: no vote term: %v", dir, err)
	}
	if cand, err = s.Get(stableLastVoteCand); err != nil {
		t.Fatalf("%s: no vote: %v", dir, err)
	}
	return term, voteTerm, cand
}

// TestBackUpIsTheStateAtItsIndex: backups taken while commands are applied, each
// read back as serve and `meshctl check` read a store (Inspect: checked, the
// snapshot restored, the log replayed), hold exactly the state the member's state
// machine had at the backup's index: no command after it, none missing before it.
// The store holds the snapshot and no log entry, its term the member's and a vote
// for itself in it; a backup taken with nothing applied since the last is the same
// state, copied from the member's newest snapshot.
func TestBackUpIsTheStateAtItsIndex(t *testing.T) {
	t.Parallel()
	cfg, fsm := backupCfg(t)
	n := startLeader(t, cfg)
	defer n.Close()
	for i := range 5 {
		probe(t, n, fmt.Sprintf("p%d", i))
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 5; i < 60; i++ {
			if _, err := n.Apply(state.Command{Op: state.OpProbe, Probe: &state.ProbeCmd{ID: fmt.Sprintf("p%d", i)}}, 2*time.Second); err != nil {
				t.Error(err)
				return
			}
		}
	})
	out := t.TempDir()
	check := func(name string, want BackupStore) BackupStore {
		t.Helper()
		dir := filepath.Join(out, name)
		got, err := n.BackUp(ctx, dir)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		in, err := Inspect(dir, "cp-1", "", func() raft.FSM { return &probeFSM{} }, time.Second)
		if err != nil {
			t.Fatalf("%s: the backup's store is refused: %v", name, err)
		}
		ids := in.State.(*probeFSM).list()
		if wantIDs := fsm.stateAt(got.Index); !slices.Equal(ids, wantIDs) || len(ids) < 5 {
			t.Fatalf("%s at index %d holds %v; the state machine held %v at that index", name, got.Index, ids, wantIDs)
		}
		if in.Snapshot == nil || in.Snapshot.Index != got.Index || in.Applied != got.Index || in.LastIndex != 0 || in.Commands != 0 {
			t.Fatalf("%s: %+v (snapshot %+v); want the snapshot at %d and no log entry", name, in, in.Snapshot, got.Index)
		}
		if len(in.Servers) != 1 || in.Servers[0].ID != "cp-1" || in.Servers[0].Address != raft.ServerAddress(cfg.Bind) {
			t.Fatalf("%s: members %+v, want cp-1 at %s", name, in.Servers, cfg.Bind)
		}
		term, voteTerm, cand := readVote(t, dir)
		if term != got.CurrentTerm || term < got.Term || term < n.raft.CurrentTerm() || voteTerm != term || string(cand) != cfg.Bind || in.CurrentTerm != term {
			t.Fatalf("%s: term %d, vote in %d for %q; want the member's term %d (snapshot's %d) and its vote for itself",
				name, term, voteTerm, cand, got.CurrentTerm, got.Term)
		}
		if got.Taken != want.Taken || want.Index != 0 && got.Index != want.Index {
			t.Fatalf("%s: %+v, want %+v", name, got, want)
		}
		return got
	}
	first := check("during-1", BackupStore{Taken: true})
	check("during-2", BackupStore{Taken: true})
	wg.Wait()
	last := check("after", BackupStore{Taken: true})
	if last.Index <= first.Index || !slices.Equal(fsm.stateAt(last.Index), fsm.list()) {
		t.Fatalf("the backup after every command is at %d (the first at %d), holding %v of %v", last.Index, first.Index, fsm.stateAt(last.Index), fsm.list())
	}
	// Nothing applied since: Raft takes no snapshot, and the member's newest one
	// is the backup.
	check("again", BackupStore{Taken: false, Index: last.Index})
	if _, err := n.BackUp(ctx, filepath.Join(out, "again")); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("a backup into a directory that exists: %v, want it refused", err)
	}
}

// TestAMemberStartsOnABackUp: a member opened on a backup's store, as serve opens a
// data directory (MustHoldState), starts from its snapshot alone, leads, and
// writes after it under a term past the snapshot's and the old member's.
func TestAMemberStartsOnABackUp(t *testing.T) {
	t.Parallel()
	cfg, _ := backupCfg(t)
	n := startLeader(t, cfg)
	for i := range 4 {
		probe(t, n, fmt.Sprintf("p%d", i))
	}
	dir := filepath.Join(t.TempDir(), "raft")
	st, err := n.BackUp(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	probe(t, n, "after the backup")
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}

	restored := &probeFSM{}
	rcfg := cfg
	rcfg.Dir, rcfg.FSM, rcfg.MustHoldState = dir, restored, true
	r, err := Open(rcfg)
	if err != nil {
		t.Fatalf("open on the backup: %v", err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if got := restored.list(); !slices.Equal(got, []string{"p0", "p1", "p2", "p3"}) {
		t.Fatalf("the member on the backup holds %v, want p0..p3 (not what came after the backup)", got)
	}
	index, err := r.ApplyIndex(state.Command{Op: state.OpProbe, Probe: &state.ProbeCmd{ID: "p4"}}, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var l raft.Log
	if err := r.store.GetLog(index, &l); err != nil {
		t.Fatal(err)
	}
	if index <= st.Index || l.Term <= st.CurrentTerm {
		t.Fatalf("p4 written at index %d in term %d; the backup is at %d, term %d: want both past it", index, l.Term, st.Index, st.CurrentTerm)
	}
}
