package replication

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"mesh/controlplane/state"
)

// probeFSM records the ids of the probe commands it applies, and keeps them in its
// snapshots.
type probeFSM struct {
	mu  sync.Mutex
	ids []string
}

func (f *probeFSM) Apply(l *raft.Log) any {
	var c state.Command
	if json.Unmarshal(l.Data, &c) == nil && c.Probe != nil {
		f.mu.Lock()
		f.ids = append(f.ids, c.Probe.ID)
		f.mu.Unlock()
	}
	return state.Result{}
}

func (f *probeFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	data, err := json.Marshal(f.ids)
	return snapshot(data), err
}

func (f *probeFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	return json.NewDecoder(rc).Decode(&f.ids)
}

func (f *probeFSM) list() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.ids)
}

type snapshot []byte

func (s snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}
func (snapshot) Release() {}

func probeIDs(t *testing.T, entries func(func(*raft.Log) bool)) []string {
	t.Helper()
	var out []string
	for l := range entries {
		var c state.Command
		if err := json.Unmarshal(l.Data, &c); err != nil || c.Probe == nil {
			t.Fatalf("entry %d is not a probe: %v", l.Index, err)
		}
		out = append(out, c.Probe.ID)
	}
	return out
}

// TestLogAheadShowsWhatTheLogHoldsBeyondTheSnapshot: a member reopened is shown
// the commands it logged after its newest snapshot, and can restore that snapshot
// into a new state machine, before Raft starts: the snapshot's commands there, the
// others in the tail, each once, and the tail readable twice. Without a snapshot,
// the whole log is the tail.
func TestLogAheadShowsWhatTheLogHoldsBeyondTheSnapshot(t *testing.T) {
	t.Parallel()
	for _, snap := range []bool{true, false} {
		ca := newCA(t, "mesh")
		cfg := Config{Dir: t.TempDir(), ID: "cp-1", Bind: freeAddr(t), TLS: leafConfig(t, ca), FSM: &probeFSM{},
			EmptyFSM: func() raft.FSM { return &probeFSM{} }, Logger: slog.New(slog.DiscardHandler),
			Timeouts: Timeouts{Heartbeat: 100 * time.Millisecond, SnapshotThreshold: 1 << 20, SnapshotInterval: time.Hour}}
		n := startLeader(t, cfg)
		for _, id := range []string{"p1", "p2", "p3"} {
			probe(t, n, id)
		}
		if snap {
			if err := n.raft.Snapshot().Error(); err != nil {
				t.Fatal(err)
			}
		}
		probe(t, n, "p4")
		probe(t, n, "p5")
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}

		var tail LogTail
		cfg.FSM = &probeFSM{}
		cfg.LogAhead = func(lt LogTail) { tail = lt }
		n, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		wantSnap, wantTail := []string{"p1", "p2", "p3"}, []string{"p4", "p5"}
		if !snap {
			wantSnap, wantTail = nil, []string{"p1", "p2", "p3", "p4", "p5"}
		}
		if tail.Entries == nil {
			t.Fatal("LogAhead was not called")
		}
		for range 2 {
			if got := probeIDs(t, tail.Entries); !slices.Equal(got, wantTail) {
				t.Errorf("snapshot %v: the tail holds %v, want %v", snap, got, wantTail)
			}
		}
		restored, err := tail.Restore()
		if err != nil {
			t.Fatal(err)
		}
		if got := restored.(*probeFSM).list(); !slices.Equal(got, wantSnap) {
			t.Errorf("snapshot %v: the restored state machine holds %v, want %v", snap, got, wantSnap)
		}
		n.Close()
	}
}

// TestAskMembers: a member answers the members question of a peer it allows, over
// the Raft port, and Raft's own traffic on that port goes on as before. A leaf of
// the CA it does not allow gets no answer, and the asker refuses to ask a peer it
// does not allow itself.
func TestAskMembers(t *testing.T) {
	t.Parallel()
	ca := newCA(t, "mesh")
	discard := slog.New(slog.DiscardHandler)
	leaderTLS, followerTLS, strangerTLS := leafConfig(t, ca), leafConfig(t, ca), leafConfig(t, ca)
	set := allow(pinOf(t, leaderTLS), pinOf(t, followerTLS))
	answer := func(who string) func() []byte { return func() []byte { return []byte(`{"from":"` + who + `"}`) } }
	leader := startLeader(t, Config{Dir: t.TempDir(), ID: "cp-1", Bind: freeAddr(t), TLS: leaderTLS, FSM: &countFSM{}, Logger: discard, Timeouts: twoVoters,
		PeerAllowed: set.allowed, Members: answer("cp-1")})
	defer leader.Close()
	fsm := &countFSM{}
	fcfg := Config{Dir: t.TempDir(), ID: "cp-2", Bind: freeAddr(t), TLS: followerTLS, FSM: fsm, Logger: discard, Timeouts: twoVoters,
		PeerAllowed: set.allowed, Members: answer("cp-2")}
	follower := startFollower(t, leader, fcfg)
	if err := leader.Promote("cp-2", fcfg.Bind, time.Second); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		from, to *Node
		addr     string
		want     string
	}{{follower, leader, leader.stream.Addr().String(), `{"from":"cp-1"}`}, {leader, follower, fcfg.Bind, `{"from":"cp-2"}`}} {
		got, err := c.from.AskMembers(c.addr, 2*time.Second)
		if err != nil || string(got) != c.want {
			t.Fatalf("asking %s: %q, %v; want %s", c.addr, got, err, c.want)
		}
	}
	// Raft goes on over the same port: each command needs the follower's vote.
	for i := range 5 {
		probe(t, leader, "p"+string(rune('0'+i)))
	}
	waitFor(t, "the follower applies every command", func() bool { return fsm.n.Load() == 5 })

	stranger := newStream(t, strangerTLS, nil, discard)
	if got, err := stranger.askMembers(leader.stream.Addr().String(), time.Second); err == nil {
		t.Fatalf("a leaf the leader does not allow was answered: %q", got)
	}
	strangerNode := newStream(t, strangerTLS, nil, discard)
	strangerNode.members = answer("stranger")
	go func() {
		for {
			c, err := strangerNode.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	if _, err := leader.AskMembers(strangerNode.Addr().String(), time.Second); !errors.Is(err, errNotMember) {
		t.Fatalf("asking a peer the asker does not allow: %v, want the refusal", err)
	}
}
