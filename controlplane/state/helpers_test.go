package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// t0 is far in the past on purpose: if the state machine read the local clock instead
// of the command's At, every token in these tests would look long expired.
var t0 = time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)

const testValidity = time.Hour

// machine drives an FSM through a real raft.Log sequence.
type machine struct {
	t     testing.TB
	f     *FSM
	index uint64
}

func newMachine(t testing.TB) *machine { return &machine{t: t, f: NewFSM()} }

// apply encodes c as the leader would and applies it at the next index.
func (m *machine) apply(c Command) Result {
	m.t.Helper()
	data, err := json.Marshal(c)
	if err != nil {
		m.t.Fatalf("encode command: %v", err)
	}
	return m.applyRaw(data)
}

func (m *machine) applyRaw(data []byte) Result {
	m.t.Helper()
	m.index++
	out := m.f.Apply(&raft.Log{Type: raft.LogCommand, Index: m.index, Data: data})
	res, ok := out.(Result)
	if !ok {
		m.t.Fatalf("Apply returned %T, want Result", out)
	}
	return res
}

// must applies c and fails the test if it was refused.
func (m *machine) must(c Command) Result {
	m.t.Helper()
	r := m.apply(c)
	if r.Err != nil {
		m.t.Fatalf("%s at %s: %v", c.Op, c.At.Format(time.RFC3339), r.Err)
	}
	return r
}

func (m *machine) state() *State {
	var c *State
	m.f.Read(func(s *State) { c = s.Clone() })
	return c
}

func (m *machine) snapshot() []byte {
	m.t.Helper()
	return snapshotBytes(m.t, m.f)
}

func snapshotBytes(t testing.TB, f *FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatalf("Persist: %v", err)
	}
	snap.Release()
	if !sink.closed {
		t.Fatal("Persist did not close the sink")
	}
	return sink.Bytes()
}

// memSink is a raft.SnapshotSink in memory.
type memSink struct {
	bytes.Buffer
	closed, cancelled bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Close() error  { s.closed = true; return nil }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }

// failSink refuses every write.
type failSink struct{ memSink }

func (s *failSink) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func initCmd(mesh string, at time.Time) Command {
	return Command{Op: OpInit, At: at, Init: &InitCmd{
		Mesh:         mesh,
		AdminAccount: "AADMINACCOUNT",
		Keyring:      Keyring{Epoch: 1, Keys: []string{"aa11"}, Envelope: json.RawMessage(`{"payloadType":"k"}`)},
		Validity:     testValidity,
	}}
}

func tokenCmd(id, node, role string, at time.Time, ttl time.Duration) Command {
	c := &CreateTokenCmd{ID: id, Node: node, Role: role, TTL: ttl}
	if role == RoleControl {
		c.Control = &ControlAddrs{Broker: "10.0.0.9:7300", Raft: "10.0.0.9:7301", Cluster: "10.0.0.9:7302"}
		c.Sealed = []byte("sealed identity")
	}
	return Command{Op: OpCreateToken, At: at, CreateToken: c}
}

func enrolCmd(id, node, role, key string, at time.Time) Command {
	return Command{Op: OpEnrol, At: at, Enrol: &EnrolCmd{TokenID: id, Node: node, Role: role, PublicKey: key}}
}

func declareCmd(sel Selector, body string, at time.Time) Command {
	return Command{Op: OpDeclare, At: at, Declare: &DeclareCmd{Selector: sel, Body: json.RawMessage(body)}}
}

func revokeCmd(node string, at time.Time) Command {
	return Command{Op: OpRevoke, At: at, Revoke: &RevokeCmd{Node: node}}
}

// enrolled initialises a mesh and enrols the given nodes (id → role), each with key
// "K-<id>" and token "tok-<id>".
func enrolled(t testing.TB, nodes map[string]string) *machine {
	t.Helper()
	m := newMachine(t)
	m.must(initCmd("demo", t0))
	for _, id := range sortedKeys(nodes) {
		m.must(tokenCmd("tok-"+id, id, nodes[id], t0, time.Hour))
		m.must(enrolCmd("tok-"+id, id, nodes[id], "K-"+id, t0.Add(time.Minute)))
	}
	return m
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }
