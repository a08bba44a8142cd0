package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"
)

// FuzzRestore feeds arbitrary bytes to Restore as a snapshot. It must not panic; a
// refused snapshot is ErrBadSnapshot and leaves the state as it was; an accepted one
// is one JSON object, snapshots again to bytes that restore to the same bytes, and
// leaves a state machine that still applies commands; one of newer rules stops the
// state machine with nothing of it taken.
func FuzzRestore(f *testing.F) {
	m := newMachine(f)
	for _, c := range history()[:12] {
		m.apply(c)
	}
	snap := m.snapshot()
	f.Add(snap)
	f.Add(snap[:len(snap)/2])
	f.Add(append(bytes.Clone(snap), '}'))
	f.Add(snapshotBytes(f, NewFSM()))
	f.Add([]byte(`{"nodes":{"a":null}}`))
	f.Add([]byte(`{"tokens":{"a":null}}`))
	f.Add([]byte(`{"control_nodes":{"a":null}}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{}`))
	f.Add(newerRules(f, snap))
	f.Add(forgottenSnapshot(f))
	f.Fuzz(func(t *testing.T, data []byte) {
		m := newMachine(t)
		for _, c := range history()[:12] {
			m.apply(c)
		}
		g := m.f
		before := snapshotBytes(t, g)
		if err := g.Restore(nopCloser{bytes.NewReader(data)}); err != nil {
			if !errors.Is(err, ErrBadSnapshot) {
				t.Fatalf("error of no known kind: %v", err)
			}
			if !bytes.Equal(snapshotBytes(t, g), before) {
				t.Fatal("a refused snapshot changed the state")
			}
			return
		}
		if !json.Valid(data) || bytes.TrimLeft(data, " \t\r\n")[0] != '{' {
			t.Fatalf("restored what is not one JSON object: %q", data)
		}
		if stoppedAtNewerRules(t, g, before) {
			return
		}
		again := snapshotBytes(t, g)
		h := NewFSM()
		if err := h.Restore(nopCloser{bytes.NewReader(again)}); err != nil {
			t.Fatalf("its own snapshot refused: %v", err)
		}
		if !bytes.Equal(snapshotBytes(t, h), again) {
			t.Fatal("snapshot does not survive a restore")
		}
		// The machine still works on whatever it restored.
		for _, c := range history() {
			m.apply(c)
		}
		m.apply(Command{Op: OpProbe, At: t0.Add(time.Hour), Probe: &ProbeCmd{ID: "after"}})
		m.state()
		snapshotBytes(t, g)
	})
}

// TestRestoreRefusesWhatItCannotUse: a snapshot cut short, followed by anything, null,
// not an object, or with null where a token or node belongs is ErrBadSnapshot, and
// the state stays as it was. A null node used to crash the control node in reindex.
func TestRestoreRefusesWhatItCannotUse(t *testing.T) {
	m := enrolled(t, map[string]string{"a": RoleWorker})
	before := m.snapshot()
	for name, in := range map[string]string{
		"cut short":           string(before[:len(before)-1]),
		"trailing brace":      string(before) + "}",
		"trailing object":     string(before) + "{}",
		"null":                "null",
		"an array":            "[]",
		"a null token":        `{"tokens":{"t":null}}`,
		"a null node":         `{"nodes":{"a":null}}`,
		"a null control node": `{"control_nodes":{"c":null}}`,
	} {
		err := m.f.Restore(nopCloser{bytes.NewReader([]byte(in))})
		if !errors.Is(err, ErrBadSnapshot) {
			t.Errorf("%s: %v, want ErrBadSnapshot", name, err)
		}
		if !bytes.Equal(m.snapshot(), before) {
			t.Fatalf("%s: a refused snapshot changed the state", name)
		}
	}
	// Its own snapshot, and one with white space after it, restore.
	if err := m.f.Restore(nopCloser{bytes.NewReader(append(bytes.Clone(before), "\n"...))}); err != nil {
		t.Fatal(err)
	}
}

// TestARepeatWithoutItsNodeIsRefused: a state that holds a used token without the
// node it enrolled (only a damaged snapshot can: a ForgetCmd removes only a node
// revoked long after its token was purged), or with
// that node under another key, answers a repeat of the enrolment with ErrTokenUsed.
// The first crashed the state machine, on every control node replaying the entry
// (found by FuzzRestore, testdata/fuzz/FuzzRestore/61228406bc43d94d).
func TestARepeatWithoutItsNodeIsRefused(t *testing.T) {
	m := newMachine(t)
	for _, c := range history()[:7] { // b enrolled with KB by token t-b
		m.apply(c)
	}
	snap := m.snapshot()
	repeat := enrolCmd("t-b", "b", RoleWorker, "KB", t0.Add(3*time.Minute))
	for name, change := range map[string]func(nodes map[string]map[string]any){
		"as it was":                 func(map[string]map[string]any) {},
		"no node":                   func(nodes map[string]map[string]any) { delete(nodes, "b") },
		"the node's key is another": func(nodes map[string]map[string]any) { nodes["b"]["public_key"] = "KOTHER" },
	} {
		t.Run(name, func(t *testing.T) {
			var doc map[string]json.RawMessage
			var nodes map[string]map[string]any
			if err := json.Unmarshal(snap, &doc); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(doc["nodes"], &nodes); err != nil || nodes["b"] == nil {
				t.Fatalf("no node b in the snapshot: %v", err)
			}
			change(nodes)
			doc["nodes"], _ = json.Marshal(nodes)
			data, _ := json.Marshal(doc)
			r := newMachine(t)
			if err := r.f.Restore(nopCloser{bytes.NewReader(data)}); err != nil {
				t.Fatalf("restore: %v", err)
			}
			res := r.apply(repeat)
			if name == "as it was" {
				if res.Err != nil || res.Node == nil || res.Node.PublicKey != "KB" {
					t.Fatalf("the repeat of b's enrolment: %+v", res)
				}
				return
			}
			if !errors.Is(res.Err, ErrTokenUsed) || res.Node != nil {
				t.Fatalf("a repeat with nothing to repeat: %+v, want ErrTokenUsed", res)
			}
		})
	}
}

// FuzzRestoreThenApply: whatever snapshot the state machine accepts, no log entry
// applied after it may panic, and the state still snapshots and restores to the same
// bytes. FuzzRestore applies the same history after each snapshot; an entry this
// history lacks (the repeat of an enrolment whose node the snapshot did not hold) was
// what crashed every control node.
func FuzzRestoreThenApply(f *testing.F) {
	m := newMachine(f)
	for _, c := range history()[:12] {
		m.apply(c)
	}
	snap := m.snapshot()
	for _, c := range history() {
		entry, _ := json.Marshal(c)
		f.Add(snap, entry)
		f.Add([]byte(`{}`), entry)
	}
	// The crasher: b's token used, b gone, and b's enrolment repeated.
	var doc map[string]json.RawMessage
	var nodes map[string]json.RawMessage
	if json.Unmarshal(snap, &doc) != nil || json.Unmarshal(doc["nodes"], &nodes) != nil {
		f.Fatal("the history's snapshot does not decode")
	}
	delete(nodes, "b")
	doc["nodes"], _ = json.Marshal(nodes)
	withoutB, _ := json.Marshal(doc)
	repeat, _ := json.Marshal(enrolCmd("t-b", "b", RoleWorker, "KB", t0.Add(3*time.Minute)))
	f.Add(withoutB, repeat)
	// A snapshot of newer rules stops the state machine: no entry applies after it,
	// and it takes no snapshot.
	f.Add(newerRules(f, snap), repeat)
	// b revoked and forgotten: its id enrolled again, revoked again, labelled,
	// forgotten again.
	forgot := forgottenSnapshot(f)
	for _, c := range []Command{
		stamped(tokenCmd("t-b3", "b", RoleWorker, t0.Add(time.Hour), time.Hour)),
		{Op: OpRevoke, At: t0.Add(time.Hour), Rules: RulesForgetRevoked, Revoke: &RevokeCmd{Nodes: []string{"b", "a"}, Keys: map[string]string{"b": "KB"}}},
		{Op: OpLabel, At: t0.Add(time.Hour), Rules: RulesForgetRevoked, Label: &LabelCmd{Node: "b", Labels: map[string]string{"k": "v"}}},
		forgetCmd(t0.Add(time.Hour), t0.Add(time.Hour), "a", "b"),
	} {
		entry, _ := json.Marshal(c)
		f.Add(forgot, entry)
	}
	f.Add(forgot, repeat)
	f.Fuzz(func(t *testing.T, snapshot, entry []byte) {
		m := newMachine(t)
		for _, c := range history()[:12] {
			m.apply(c)
		}
		if err := m.f.Restore(nopCloser{bytes.NewReader(snapshot)}); err != nil {
			return // FuzzRestore holds refusals to their rules
		}
		before := stateBytes(t, m.f)
		halted := m.f.HaltErr() != nil
		m.applyRaw(entry)
		m.applyRaw(entry)
		if halted && !bytes.Equal(stateBytes(t, m.f), before) {
			t.Fatal("an entry was applied after the state machine stopped")
		}
		if stoppedAtNewerRules(t, m.f, nil) {
			return
		}
		again := m.snapshot()
		g := NewFSM()
		if err := g.Restore(nopCloser{bytes.NewReader(again)}); err != nil {
			t.Fatalf("its own snapshot refused: %v", err)
		}
		if !bytes.Equal(snapshotBytes(t, g), again) {
			t.Fatal("snapshot does not survive a restore")
		}
		revokedIndexAgrees(t, m.state())
	})
}

// newerRules returns snap stamped with the rules after this code's.
func newerRules(t testing.TB, snap []byte) []byte {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(snap, &doc); err != nil {
		t.Fatal(err)
	}
	doc["rules"], _ = json.Marshal(ApplyRules + 1)
	data, _ := json.Marshal(doc)
	return data
}

// stoppedAtNewerRules reports whether f stopped at a snapshot or an entry of newer
// rules than this code's (TestSnapshotOfNewerRulesStopsTheStateMachine,
// TestEntryOfNewerRulesStopsTheStateMachine): it then takes no snapshot, and, when
// before is given, its state is still those bytes, nothing of the snapshot taken.
// A running one has nothing to say why it stopped.
func stoppedAtNewerRules(t *testing.T, f *FSM, before []byte) bool {
	t.Helper()
	err := f.HaltErr()
	if err == nil {
		return false
	}
	if !errors.Is(err, ErrNewerRules) {
		t.Fatalf("stopped for a reason of no known kind: %v", err)
	}
	if _, serr := f.Snapshot(); !errors.Is(serr, ErrNewerRules) {
		t.Fatalf("a stopped state machine took a snapshot: %v", serr)
	}
	if before != nil && !bytes.Equal(stateBytes(t, f), before) {
		t.Fatal("a snapshot of newer rules changed the state")
	}
	return true
}

// stateBytes is the state as Snapshot encodes it, read whether or not the state
// machine stopped.
func stateBytes(t *testing.T, f *FSM) []byte {
	t.Helper()
	var data []byte
	var err error
	f.Read(func(s *State) { data, err = json.Marshal(s) })
	if err != nil {
		t.Fatalf("encode the state: %v", err)
	}
	return data
}

// revokedIndexAgrees holds the index of revoked keys by node to RevokedKeys, which
// it is derived from: whatever was restored and applied, each node lists exactly its
// keys (Revocations reads the index alone).
func revokedIndexAgrees(t *testing.T, s *State) {
	t.Helper()
	want := map[string][]string{}
	for key, id := range s.RevokedKeys {
		want[id] = append(want[id], key)
	}
	for id, keys := range s.revokedOf {
		if len(keys) == 0 {
			delete(s.revokedOf, id)
		}
	}
	if len(want) != len(s.revokedOf) {
		t.Fatalf("the index of revoked keys lists %d nodes, RevokedKeys %d", len(s.revokedOf), len(want))
	}
	for id, keys := range want {
		got := slices.Sorted(slices.Values(s.revokedOf[id]))
		if !slices.Equal(got, slices.Sorted(slices.Values(keys))) {
			t.Fatalf("node %s: the index lists revoked keys %v, RevokedKeys %v", id, got, keys)
		}
	}
}

// forgottenSnapshot is a snapshot of the history up to b's revocation, with b's
// record forgotten since (State.Forgotten).
func forgottenSnapshot(f *testing.F) []byte {
	m := newMachine(f)
	for _, c := range history()[:15] {
		m.apply(c)
	}
	if r := m.apply(forgetCmd(t0.Add(time.Hour), t0.Add(time.Hour), "b")); r.Err != nil || len(r.Forgotten) != 1 {
		f.Fatalf("forgetting b in the history: %+v", r)
	}
	return m.snapshot()
}
