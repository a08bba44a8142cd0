package daemon

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"mesh/controlplane/replication"
	"mesh/controlplane/state"
)

// fsmOf applies cmds, as log entries from index 1, to a new state machine.
func fsmOf(t *testing.T, cmds ...state.Command) *state.FSM {
	t.Helper()
	f := state.NewFSM()
	applyAll(t, f, 1, cmds...)
	return f
}

func applyAll(t *testing.T, f *state.FSM, from uint64, cmds ...state.Command) {
	t.Helper()
	for i, l := range entriesOf(t, from, cmds...) {
		if res, _ := f.Apply(l).(state.Result); res.Err != nil {
			t.Fatalf("command %d (%s): %v", i, cmds[i].Op, res.Err)
		}
	}
}

func entriesOf(t *testing.T, from uint64, cmds ...state.Command) []*raft.Log {
	t.Helper()
	var out []*raft.Log
	for i, c := range cmds {
		data, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, &raft.Log{Index: from + uint64(i), Type: raft.LogCommand, Data: data})
	}
	return out
}

// snapshotOf is f's snapshot, as bytes.
func snapshotOf(t *testing.T, f *state.FSM) []byte {
	t.Helper()
	s, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink bufSink
	if err := s.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	return sink.Bytes()
}

type bufSink struct{ bytes.Buffer }

func (*bufSink) ID() string    { return "test" }
func (*bufSink) Close() error  { return nil }
func (*bufSink) Cancel() error { return nil }

var at0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func meshInit() state.Command {
	return state.Command{Op: state.OpInit, At: at0, Init: &state.InitCmd{Mesh: "demo", AdminAccount: "AADMIN",
		Control:  state.ControlNode{ID: "cp-1", Broker: "10.0.0.1:7300", Raft: "10.0.0.1:7301", Cluster: "10.0.0.1:7302", Pin: "p1", Operator: "UOP1"},
		Keyring:  state.Keyring{Epoch: 1, Keys: []string{"aa11"}, Envelope: json.RawMessage(`{"payloadType":"k"}`)},
		Validity: time.Hour}}
}

func admission(node, pin string, at time.Time) []state.Command {
	return []state.Command{
		{Op: state.OpCreateToken, At: at, CreateToken: &state.CreateTokenCmd{ID: "tok-" + node, Node: node, Role: state.RoleControl, TTL: time.Hour,
			Control: &state.ControlAddrs{Broker: node + ":7300", Raft: node + ":7301", Cluster: node + ":7302", Pin: pin, Operator: "UOP-" + node},
			Sealed:  []byte("sealed")}},
		{Op: state.OpEnrol, At: at, Enrol: &state.EnrolCmd{TokenID: "tok-" + node, Node: node, Role: state.RoleControl, PublicKey: "K-" + node, CurveKey: "X-" + node}},
	}
}

func hostEnrolment(node string, at time.Time) []state.Command {
	return []state.Command{
		{Op: state.OpCreateToken, At: at, CreateToken: &state.CreateTokenCmd{ID: "tok-" + node, Node: node, Role: "worker", TTL: time.Hour,
			Labels: map[string]string{"note": `"role":"control"`}}},
		{Op: state.OpEnrol, At: at, Enrol: &state.EnrolCmd{TokenID: "tok-" + node, Node: node, Role: "worker", PublicKey: "K-" + node}},
	}
}

// tailOf is a LogTail over entries after snap, counting the snapshot's restores.
func tailOf(snap []byte, entries []*raft.Log, restores *atomic.Int32) replication.LogTail {
	return replication.LogTail{
		Entries: func(yield func(*raft.Log) bool) {
			for _, l := range entries {
				if !yield(l) {
					return
				}
			}
		},
		Restore: func() (raft.FSM, error) {
			restores.Add(1)
			f := state.NewFSM()
			return f, f.Restore(io.NopCloser(bytes.NewReader(snap)))
		},
	}
}

// TestLogAheadAcceptsMembersTheLogAdmits: at start the state holds the snapshot;
// the log after it admits cp-2. Raft accepts cp-2 at once, cp-3 (never admitted)
// not; once the state has applied the entries and a removal of cp-2 after them,
// cp-2 is refused: what the log said ahead never outweighs the state's newer word.
// A tail that admits no control node costs no second restore.
func TestLogAheadAcceptsMembersTheLogAdmits(t *testing.T) {
	base := []state.Command{meshInit()}
	base = append(base, hostEnrolment("web-1", at0)...)
	live := fsmOf(t, base...)
	snap := snapshotOf(t, live)
	tail := append(hostEnrolment("web-2", at0.Add(time.Minute)), admission("cp-2", "p2", at0.Add(time.Minute))...)
	entries := entriesOf(t, uint64(len(base)+1), tail...)

	d := &Daemon{log: slog.New(slog.DiscardHandler), fsm: live}
	if d.peerAllowed("p2") {
		t.Fatal("cp-2 accepted before anything was learnt; the test shows nothing")
	}
	var restores atomic.Int32
	d.keepTail(tailOf(snap, entries, &restores))
	d.logAhead()
	if n := restores.Load(); n != 1 {
		t.Fatalf("restored the snapshot %d times for a tail that admits a control node, want 1", n)
	}
	if !d.peerAllowed("p1") || !d.peerAllowed("p2") {
		t.Fatal("the members of the log's tail are not accepted ahead of the state")
	}
	if d.peerAllowed("p3") {
		t.Fatal("a pin neither the state nor the log names is accepted")
	}

	// The state catches up, then removes cp-2.
	applyAll(t, live, uint64(len(base)+1), tail...)
	applyAll(t, live, uint64(len(base)+len(tail)+1), state.Command{Op: state.OpRemoveControl, At: at0.Add(2 * time.Minute),
		RemoveControl: &state.RemoveControlCmd{Node: "cp-2"}})
	if d.peerAllowed("p2") {
		t.Fatal("the removed cp-2 is still accepted on the word of the older log tail")
	}

	// Started as a node does: the tail kept, read only once a peer is refused, in
	// the background; Raft's next try gets in.
	d3 := &Daemon{log: slog.New(slog.DiscardHandler), fsm: fsmOf(t, base...)}
	var restores3 atomic.Int32
	d3.keepTail(tailOf(snap, entries, &restores3))
	if restores3.Load() != 0 {
		t.Fatal("the tail was read at start, before any peer was refused")
	}
	if d3.peerAllowed("p2") {
		t.Fatal("cp-2 accepted before the tail was read")
	}
	deadline := time.Now().Add(5 * time.Second)
	for !d3.peerAllowed("p2") {
		if time.Now().After(deadline) {
			t.Fatal("the refusal of cp-2 did not have the tail read")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := restores3.Load(); n != 1 {
		t.Fatalf("the snapshot was restored %d times, want once however many refusals", n)
	}

	// A tail without a control admission.
	d2 := &Daemon{log: slog.New(slog.DiscardHandler), fsm: fsmOf(t, base...)}
	var restores2 atomic.Int32
	d2.keepTail(tailOf(snap, entriesOf(t, uint64(len(base)+1), hostEnrolment("web-2", at0)...), &restores2))
	d2.logAhead()
	if n := restores2.Load(); n != 0 {
		t.Fatalf("restored the snapshot %d times for a tail without a control admission", n)
	}
}

// TestAheadViewKeepsTheNewest: what is learnt ahead of the state is the newest
// membership heard of; an older or equal one, or one without pins (its sender
// checks none), changes nothing; it counts only while newer than the state; clear
// forgets it.
func TestAheadViewKeepsTheNewest(t *testing.T) {
	var v aheadView
	if !v.offer(membersAnswer{Version: 5, Pins: []string{"a", "b"}}) {
		t.Fatal("the first answer was not kept")
	}
	for _, a := range []membersAnswer{{Version: 5, Pins: []string{"x"}}, {Version: 4, Pins: []string{"x"}}, {Version: 9}} {
		if v.offer(a) {
			t.Fatalf("kept %+v over version 5", a)
		}
	}
	if !v.allows("b", 4) || v.allows("x", 4) || v.allows("b", 5) {
		t.Fatal("allows does not follow the newest answer and the state's version")
	}
	if !v.clear() || v.clear() || v.allows("b", 0) {
		t.Fatal("clear did not forget")
	}
}

func TestAdmitsControl(t *testing.T) {
	for _, c := range []struct {
		cmds []state.Command
		want bool
	}{
		{admission("cp-2", "p2", at0)[1:], true},
		{admission("cp-2", "p2", at0)[:1], false}, // minting is no admission
		{hostEnrolment("web-1", at0), false},      // a label holding the words
	} {
		for _, l := range entriesOf(t, 1, c.cmds...) {
			if got := admitsControl(l.Data); got != c.want {
				t.Errorf("admitsControl(%s) = %v", l.Data, got)
			}
		}
	}
	if admitsControl([]byte(`{"op":"enrol","enrol":{"role":"control"`)) {
		t.Error("a truncated entry counts as an admission")
	}
}
