package replication

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"mesh/controlplane/state"
)

// gateFSM counts the commands it applies, and holds each one while its gate is shut,
// as a state machine busy with a large command would.
type gateFSM struct {
	n    atomic.Uint64
	mu   sync.Mutex
	gate chan struct{} // nil or closed: open
}

func (f *gateFSM) shut() {
	f.mu.Lock()
	f.gate = make(chan struct{})
	f.mu.Unlock()
}

func (f *gateFSM) open() {
	f.mu.Lock()
	if f.gate != nil {
		close(f.gate)
		f.gate = nil
	}
	f.mu.Unlock()
}

func (f *gateFSM) Apply(*raft.Log) any {
	f.mu.Lock()
	g := f.gate
	f.mu.Unlock()
	if g != nil {
		<-g
	}
	f.n.Add(1)
	return state.Result{}
}
func (f *gateFSM) Snapshot() (raft.FSMSnapshot, error) { return nopSnapshot{}, nil }
func (f *gateFSM) Restore(rc io.ReadCloser) error      { return rc.Close() }

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFollowingMeansApplied: a follower is current only once its state machine has
// applied what it knows to be committed, not once Raft handed the entries to the
// state machine's goroutine (Raft's own applied index). A control node started
// right after a join computed its broker's routes from a state that did not yet
// hold the other control nodes, and its broker never routed to them. Entries the
// state machine never sees (configuration changes, those a snapshot covers) do not
// keep a follower waiting.
func TestFollowingMeansApplied(t *testing.T) {
	t.Parallel()
	ca := newCA(t, "mesh")
	quick := Timeouts{Heartbeat: 100 * time.Millisecond, Commit: 5 * time.Millisecond}
	discard := slog.New(slog.DiscardHandler)
	lcfg := Config{Dir: t.TempDir(), ID: "cp-1", Bind: freeAddr(t), TLS: leafConfig(t, ca), FSM: &countFSM{}, Logger: discard, Timeouts: quick}
	leader := startLeader(t, lcfg)
	defer leader.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	fsm := &gateFSM{}
	fcfg := Config{Dir: t.TempDir(), ID: "cp-2", Bind: freeAddr(t), TLS: leafConfig(t, ca), FSM: fsm, Logger: discard, Timeouts: quick}
	follower, err := Open(fcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { fsm.open(); follower.Close() }()
	if err := leader.AddNonvoter("cp-2", fcfg.Bind, time.Second); err != nil {
		t.Fatal(err)
	}
	probe := func(id string) {
		t.Helper()
		if _, err := leader.Apply(state.Command{Op: state.OpProbe, Probe: &state.ProbeCmd{ID: id}}, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	probe("p1")
	waitFor(t, "the follower applies the first command", func() bool { return fsm.n.Load() == 1 })
	if err := follower.WaitFollowing(ctx); err != nil {
		t.Fatal(err)
	}

	// The next command reaches the follower's Raft, but its state machine holds it.
	fsm.shut()
	probe("p2")
	waitFor(t, "Raft hands the command to the follower's state machine", func() bool {
		return follower.raft.AppliedIndex() >= leader.raft.CommitIndex()
	})
	short, cancelShort := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancelShort()
	if err := follower.WaitFollowing(short); err == nil {
		t.Fatalf("WaitFollowing returned while the state machine had applied %d of 2 commands", fsm.n.Load())
	}
	if got, commit := follower.AppliedIndex(), follower.raft.CommitIndex(); got >= commit {
		t.Fatalf("AppliedIndex %d with the command at or below commit %d not applied yet", got, commit)
	}
	fsm.open()
	if err := follower.WaitFollowing(ctx); err != nil {
		t.Fatal(err)
	}
	if got := fsm.n.Load(); got != 2 {
		t.Fatalf("WaitFollowing returned with %d of 2 commands applied", got)
	}

	// A configuration change is the last entry: the state machine never sees it.
	if err := leader.AddNonvoter("cp-3", freeAddr(t), time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the follower commits the configuration change", func() bool {
		return follower.raft.CommitIndex() == leader.raft.LastIndex()
	})
	if err := follower.WaitFollowing(ctx); err != nil {
		t.Fatalf("a configuration change after the last command kept the follower waiting: %v", err)
	}
	if got, commit := follower.AppliedIndex(), follower.raft.CommitIndex(); got < commit {
		t.Fatalf("AppliedIndex %d, commit %d: the configuration change counts as applied", got, commit)
	}

	// Restarted from a snapshot that covers every command, with a state machine
	// that applied none since (a Restore does not say its index): current at once.
	probe("p3")
	waitFor(t, "the follower applies the third command", func() bool { return fsm.n.Load() == 3 })
	waitFor(t, "a snapshot on the follower", func() bool { return follower.raft.Snapshot().Error() == nil })
	follower.Close()
	fcfg.FSM = &gateFSM{}
	follower, err = Open(fcfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := follower.WaitFollowing(ctx); err != nil {
		t.Fatalf("restarted from a snapshot: %v", err)
	}
}

// TestSnapshotRightAfterAMembershipChange: a configuration change as the last entry
// does not stop a snapshot. Raft counts it as taken by the state machine only when
// the state machine says it stores configurations; before that, after a join or a
// removal every snapshot was refused until a command followed.
func TestSnapshotRightAfterAMembershipChange(t *testing.T) {
	t.Parallel()
	ca := newCA(t, "mesh")
	quick := Timeouts{Heartbeat: 100 * time.Millisecond, Commit: 5 * time.Millisecond}
	cfg := Config{Dir: t.TempDir(), ID: "cp-1", Bind: freeAddr(t), TLS: leafConfig(t, ca), FSM: &countFSM{},
		Logger: slog.New(slog.DiscardHandler), Timeouts: quick}
	leader := startLeader(t, cfg)
	defer leader.Close()
	if _, err := leader.Apply(state.Command{Op: state.OpProbe, Probe: &state.ProbeCmd{ID: "p1"}}, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := leader.AddNonvoter("cp-2", freeAddr(t), time.Second); err != nil {
		t.Fatal(err)
	}
	if err := leader.raft.Snapshot().Error(); err != nil {
		t.Fatalf("snapshot with a membership change as the last entry: %v", err)
	}
	if got, last := leader.AppliedIndex(), leader.raft.LastIndex(); got != last {
		t.Fatalf("AppliedIndex %d, last index %d: the membership change counts as applied", got, last)
	}
}

// TestAnInstalledSnapshotIsNotWrittenAgain: a follower that installed its leader's
// snapshot holds a log shorter than the snapshot, and Raft's check (the log's last
// index less the snapshot's, wrapping around) called for a snapshot at every interval:
// the same state written again each time, until the next entry, and the copies pushed
// the older snapshots out of those kept. The follower keeps the one it installed.
func TestAnInstalledSnapshotIsNotWrittenAgain(t *testing.T) {
	t.Parallel()
	ca := newCA(t, "mesh")
	quick := Timeouts{Heartbeat: 100 * time.Millisecond, Commit: 5 * time.Millisecond, SnapshotThreshold: 4, SnapshotInterval: 50 * time.Millisecond}
	discard := slog.New(slog.DiscardHandler)
	leader := startLeader(t, Config{Dir: t.TempDir(), ID: "cp-1", Bind: freeAddr(t), TLS: leafConfig(t, ca), FSM: &countFSM{}, Logger: discard, Timeouts: quick})
	defer leader.Close()
	// The follower is a member before it runs, and the leader's snapshot ends at its
	// last entry: what the follower installs leaves it nothing to put in its log.
	fcfg := Config{Dir: t.TempDir(), ID: "cp-2", Bind: freeAddr(t), TLS: leafConfig(t, ca), FSM: &countFSM{}, Logger: discard, Timeouts: quick}
	if err := leader.AddNonvoter("cp-2", fcfg.Bind, time.Second); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := leader.Apply(state.Command{Op: state.OpProbe, Probe: &state.ProbeCmd{ID: fmt.Sprint(i)}}, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// Raft's own snapshot, every interval past 4 entries, may have taken it
	// already: then this one is refused as nothing new, and the newest holds the
	// last entry all the same.
	if err := leader.raft.Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		t.Fatal(err)
	}
	first, _ := leader.store.FirstIndex()
	if last := leader.raft.LastIndex(); first <= 1 {
		t.Fatalf("the leader's log starts at %d (last %d): not compacted", first, last)
	}
	follower, err := Open(fcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer follower.Close()
	waitFor(t, "the follower installs the leader's snapshot", func() bool {
		metas, _ := follower.snaps.List()
		return len(metas) > 0
	})
	time.Sleep(20 * quick.SnapshotInterval) // Raft checks every one or two intervals
	metas, err := follower.snaps.List()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]int{}
	for _, m := range metas {
		if seen[m.Index]++; seen[m.Index] > 1 {
			t.Fatalf("the follower wrote the snapshot of index %d again: %d snapshots kept, of indexes %v", m.Index, len(metas), seen)
		}
	}
}
