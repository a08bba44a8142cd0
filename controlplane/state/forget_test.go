package state

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"
)

// fleetKey is a node key of a real key's length (a 56-character U... nkey), so that
// the sizes measured below are a fleet's.
func fleetKey(i int) string {
	return fmt.Sprintf("U%055d", i)
}

// forgetCmd forgets ids revoked before before, as the leader proposes it.
func forgetCmd(at, before time.Time, ids ...string) Command {
	return Command{Op: OpForget, At: at, Rules: RulesForgetRevoked, Forget: &ForgetCmd{Nodes: ids, RevokedBefore: before}}
}

// ephemeralFleet enrols n machines under ids of their own (as autoscaled instances
// are), declares to each twice and revokes them, one every hour from revokedFrom, and
// keeps one host enrolled throughout.
func ephemeralFleet(t *testing.T, n int, revokedFrom time.Time) *machine {
	t.Helper()
	m := newMachine(t)
	m.must(initCmd("demo", t0))
	m.must(tokenCmd("tok-live", "live", RoleWorker, t0, time.Hour))
	m.must(enrolCmd("tok-live", "live", RoleWorker, fleetKey(n), t0))
	for i := range n {
		id := fmt.Sprintf("i-%017x", i)
		m.must(tokenCmd("tok-"+id, id, RoleWorker, t0, time.Hour))
		m.must(enrolCmd("tok-"+id, id, RoleWorker, fleetKey(i), t0))
		m.must(declareCmd(Selector{Nodes: []string{id}}, `{"files":[{"path":"/etc/a","content":"`+id+`"}]}`, t0))
		m.must(declareCmd(Selector{Nodes: []string{id}}, `{"files":[{"path":"/etc/b","content":"`+id+`"}]}`, t0))
	}
	for i := range n {
		m.must(revokeCmd(fmt.Sprintf("i-%017x", i), revokedFrom.Add(time.Duration(i)*time.Hour)))
	}
	return m
}

// TestRevokedNodesAreForgottenAndTheirKeysStayRefused: a fleet of machines each
// enrolled once and revoked when it went away (autoscaled instances, CI runners) grew
// the state by a whole record a machine for ever, in every snapshot and backup. A
// ForgetCmd replaces a revoked record by what must outlive it: the id's last version,
// which an enrolment under the id again continues after, and when it was revoked.
// Its key stays refused and told it was revoked; a revocation run again is answered
// as revoked already.
func TestRevokedNodesAreForgottenAndTheirKeysStayRefused(t *testing.T) {
	const n = 1500
	revokedFrom := t0.Add(time.Hour)
	m := ephemeralFleet(t, n, revokedFrom)
	kept := len(m.snapshot())

	// Half were revoked RevokedRetention ago: due. The other half are not yet.
	at := revokedFrom.Add(n / 2 * time.Hour).Add(RevokedRetention)
	before := at.Add(-RevokedRetention)
	var due []string
	m.f.Read(func(s *State) { due = s.RevokedDue(before, 2*n) })
	if len(due) != n/2 {
		t.Fatalf("RevokedDue = %d nodes, want the %d revoked before %s", len(due), n/2, before)
	}
	m.f.Read(func(s *State) {
		if got := s.RevokedDue(before, ForgetBatch/2); len(got) != ForgetBatch/2 || got[0] != due[0] {
			t.Fatalf("RevokedDue with a limit = %d nodes from %v, want the first %d", len(got), got[:1], ForgetBatch/2)
		}
	})
	// A command the leader proposed without the stamp is none older rules apply
	// alike: refused, nothing forgotten.
	unstamped := forgetCmd(at, before, due...)
	unstamped.Rules = RulesRevokeByKey
	if r := m.apply(unstamped); !errors.Is(r.Err, ErrBadCommand) {
		t.Fatalf("an unstamped ForgetCmd: %v, want ErrBadCommand", r.Err)
	}
	// One more than due is named: a node revoked after RevokedBefore stays, and so
	// do the live one and an unknown id.
	last := fmt.Sprintf("i-%017x", n/2)
	m.must(forgetCmd(at, before, append(due, last, "live", "ghost")...))

	s := m.state()
	if len(s.Nodes) != n/2+1 || len(s.Forgotten) != n/2 {
		t.Fatalf("after forgetting %d: %d records and %d forgotten, want %d and %d", n/2, len(s.Nodes), len(s.Forgotten), n/2+1, n/2)
	}
	if _, ok := s.Nodes[last]; !ok {
		t.Fatalf("%s, revoked at RevokedBefore, was forgotten", last)
	}
	if s.Nodes["live"] == nil || s.Nodes["live"].Revoked {
		t.Fatal("the live node was forgotten")
	}
	if len(s.RevokedKeys) != n {
		t.Fatalf("RevokedKeys holds %d keys, want every one of the %d revoked", len(s.RevokedKeys), n)
	}
	// Each forgotten body is dropped with its record: the others' own and the
	// empty one (the live node's) are left.
	if len(s.Bodies) != n/2+1 {
		t.Fatalf("%d bodies kept, want %d: the forgotten nodes' bodies are dropped", len(s.Bodies), n/2+1)
	}

	// The rest, and what it costs.
	m.must(forgetCmd(at.Add(RevokedRetention), at, s.RevokedDue(at, n)...))
	m.f.Read(func(s *State) { due = s.RevokedDue(at.Add(RevokedRetention), n) })
	m.must(forgetCmd(at.Add(RevokedRetention), at.Add(RevokedRetention), due...))
	if s := m.state(); len(s.Nodes) != 1 || len(s.Forgotten) != n {
		t.Fatalf("after forgetting every revoked node: %d records, %d forgotten", len(s.Nodes), len(s.Forgotten))
	}
	forgot := len(m.snapshot())
	base := ephemeralFleet(t, 0, revokedFrom)
	perKept := float64(kept-len(base.snapshot())) / n
	perForgotten := float64(forgot-len(base.snapshot())) / n
	t.Logf("snapshot bytes a revoked machine: %.0f kept, %.0f forgotten (its key refused: about 75 of them)", perKept, perForgotten)
	if perForgotten > 160 || perForgotten*3 > perKept {
		t.Fatalf("a forgotten machine costs %.0f snapshot bytes, a kept one %.0f: want at most 160 and a third", perForgotten, perKept)
	}

	id, oldKey := fmt.Sprintf("i-%017x", 7), fleetKey(7)
	revokedAt := revokedFrom.Add(7 * time.Hour)
	later := at.Add(2 * RevokedRetention)

	// Its key is refused and told it was revoked, at its time.
	if node, ok := m.f.RevokedKey(oldKey); !ok || node != id {
		t.Fatalf("RevokedKey(%s) = %q, %v after forgetting", oldKey, node, ok)
	}
	if rv := m.f.Revocations(id); len(rv) != 1 || rv[0].Key != oldKey || !rv[0].At.Equal(revokedAt) {
		t.Fatalf("Revocations(%s) = %+v, want %s at %s", id, rv, oldKey, revokedAt)
	}
	m.must(tokenCmd("tok-reuse", "other", RoleWorker, later, time.Hour))
	if r := m.apply(enrolCmd("tok-reuse", "other", RoleWorker, oldKey, later)); !errors.Is(r.Err, ErrKeyRevoked) {
		t.Fatalf("enrolling a forgotten node's key: %v, want ErrKeyRevoked", r.Err)
	}

	// A revocation run again is answered as revoked already, by its key; another
	// key is refused; nothing changes.
	snap := m.snapshot()
	r := m.must(Command{Op: OpRevoke, At: later, Rules: RulesForgetRevoked, Revoke: &RevokeCmd{Nodes: []string{id}}})
	if len(r.Revoked) != 1 || !r.Revoked[0].Revoked || !r.Revoked[0].RevokedAt.Equal(revokedAt) || r.Revoked[0].PublicKey != oldKey {
		t.Fatalf("revoking a forgotten node again: %+v, want revoked at %s under %s", r.Revoked, revokedAt, oldKey)
	}
	if r := m.apply(Command{Op: OpRevoke, At: later, Rules: RulesForgetRevoked, Revoke: &RevokeCmd{Nodes: []string{id}, Keys: map[string]string{id: fleetKey(8)}}}); !errors.Is(r.Err, ErrKeyMismatch) {
		t.Fatalf("revoking a forgotten node by another's key: %v, want ErrKeyMismatch", r.Err)
	}
	m.must(Command{Op: OpRevoke, At: later, Rules: RulesForgetRevoked, Revoke: &RevokeCmd{Nodes: []string{id}, Keys: map[string]string{id: oldKey}}})
	if r := m.apply(Command{Op: OpLabel, At: later, Rules: RulesForgetRevoked, Label: &LabelCmd{Node: id, Labels: map[string]string{"a": "b"}}}); !errors.Is(r.Err, ErrNodeRevoked) {
		t.Fatalf("labelling a forgotten node: %v, want ErrNodeRevoked", r.Err)
	}
	if !bytes.Equal(snap, m.snapshot()) {
		t.Fatal("revoking or labelling a forgotten node changed the state")
	}

	// A restored copy holds the same, and a machine enrolled under the id again
	// continues its versions and says when the one before it was revoked.
	r2 := newMachine(t)
	if err := r2.f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	for _, mm := range []*machine{m, r2} {
		mm.index = m.index
		mm.must(tokenCmd("tok-again", id, RoleWorker, later, time.Hour))
		e := mm.must(enrolCmd("tok-again", id, RoleWorker, fleetKey(2*n), later))
		if e.Node.Declared.Version != 2+1 || !e.Node.EarlierRevokedAt.Equal(revokedAt) {
			t.Fatalf("enrolled again under a forgotten id: version %d, earlier revoked at %s; want 3 and %s", e.Node.Declared.Version, e.Node.EarlierRevokedAt, revokedAt)
		}
		if _, ok := mm.state().Forgotten[id]; ok {
			t.Fatal("an id enrolled again is still listed forgotten")
		}
	}
	if !bytes.Equal(m.snapshot(), r2.snapshot()) {
		t.Fatal("a state restored from a snapshot with forgotten nodes applied the same entries otherwise")
	}
}

// TestAForgetCmdLeavesARecordChangedSinceTheLeaderLooked: the leader names the nodes
// revoked before a time; one enrolled again, or enrolled again and revoked again,
// before the command commits is another machine's record, and stays.
func TestAForgetCmdLeavesARecordChangedSinceTheLeaderLooked(t *testing.T) {
	m := enrolled(t, map[string]string{"a": RoleWorker, "b": RoleWorker, "c": RoleWorker})
	at := t0.Add(time.Hour)
	for _, id := range []string{"a", "b", "c"} {
		m.must(revokeCmd(id, at))
	}
	looked := at.Add(RevokedRetention + time.Minute)
	// Between the look and the commit: a enrolled again, b enrolled and revoked again.
	for _, id := range []string{"a", "b"} {
		m.must(stamped(tokenCmd("tok2-"+id, id, RoleWorker, looked, time.Hour)))
		m.must(enrolCmd("tok2-"+id, id, RoleWorker, "K2-"+id, looked))
	}
	m.must(revokeCmd("b", looked))
	m.must(forgetCmd(looked, looked.Add(-RevokedRetention), "a", "b", "c"))
	s := m.state()
	if s.Nodes["a"] == nil || s.Nodes["a"].PublicKey != "K2-a" || s.Nodes["b"] == nil || s.Nodes["b"].PublicKey != "K2-b" {
		t.Fatalf("a record changed since the leader looked was forgotten: a %+v, b %+v", s.Nodes["a"], s.Nodes["b"])
	}
	if _, ok := s.Forgotten["c"]; !ok || s.Nodes["c"] != nil {
		t.Fatal("c, revoked before and unchanged, was not forgotten")
	}

	// b, revoked under two keys, forgotten later: its last key is kept (which
	// RevokedKeys cannot tell), and b is answered as while its record was kept.
	later := looked.Add(RevokedRetention + time.Minute)
	r := m.must(forgetCmd(later, later.Add(-RevokedRetention), "b"))
	if len(r.Forgotten) != 1 || r.Forgotten[0] != "b" {
		t.Fatalf("the forget says it forgot %v, want [b]", r.Forgotten)
	}
	if f := m.state().Forgotten; f["b"].Key != "K2-b" || f["c"].Key != "" {
		t.Fatalf("forgotten b %+v, c %+v: want b's last key kept, c's (its only one) not", f["b"], f["c"])
	}
	rv := m.f.Revocations("b")
	if len(rv) != 2 || rv[0].Key != "K-b" || !rv[0].At.IsZero() || rv[1].Key != "K2-b" || !rv[1].At.Equal(looked) {
		t.Fatalf("Revocations(b) = %+v, want K-b without a time and K2-b at %s", rv, looked)
	}
	r = m.must(Command{Op: OpRevoke, At: later, Rules: RulesForgetRevoked, Revoke: &RevokeCmd{Nodes: []string{"b", "c"}}})
	if len(r.Revoked) != 2 || r.Revoked[0].PublicKey != "K2-b" || !r.Revoked[0].RevokedAt.Equal(looked) || r.Revoked[1].PublicKey != "K-c" || !r.Revoked[1].RevokedAt.Equal(at) {
		t.Fatalf("revoking b and c again: %+v", r.Revoked)
	}
	if r := m.apply(Command{Op: OpRevoke, At: later, Rules: RulesForgetRevoked, Revoke: &RevokeCmd{Nodes: []string{"b"}, Keys: map[string]string{"b": "K-b"}}}); !errors.Is(r.Err, ErrKeyMismatch) {
		t.Fatalf("revoking b again by its first machine's key: %v, want ErrKeyMismatch, as while its record was kept", r.Err)
	}
	m.must(Command{Op: OpRevoke, At: later, Rules: RulesForgetRevoked, Revoke: &RevokeCmd{Nodes: []string{"b"}, Keys: map[string]string{"b": "K2-b"}}})
	// A revocation naming a forgotten node and a live one revokes the live one.
	r = m.must(Command{Op: OpRevoke, At: later, Rules: RulesForgetRevoked, Revoke: &RevokeCmd{Nodes: []string{"c", "a"}}})
	if len(r.Revoked) != 2 || !r.Revoked[1].RevokedAt.Equal(later) || !m.state().Nodes["a"].Revoked {
		t.Fatalf("revoking c (forgotten) and a: %+v", r.Revoked)
	}
}

// TestTheLastKeyOfAForgottenRecordIsKeptWhenTheStateCannotTellIt (review 28b, LOW-1):
// in a state written before a key was refused for a second node, an id's record
// can hold a key listed revoked under the other id, so its one revoked key is an
// earlier machine's. Forgotten, the record keeps its own key, and a revocation run
// again names it, not the earlier one.
func TestTheLastKeyOfAForgottenRecordIsKeptWhenTheStateCannotTellIt(t *testing.T) {
	m := enrolled(t, map[string]string{"a": RoleWorker, "x": RoleWorker})
	at := t0.Add(time.Hour)
	m.must(revokeCmd("a", at))
	m.must(stamped(tokenCmd("tok-a2", "a", RoleWorker, at, time.Hour)))
	m.must(enrolCmd("tok-a2", "a", RoleWorker, "K2", at))
	m.f.Read(func(s *State) {
		// What an older version let happen: x enrolled with a's key.
		s.Nodes["x"].PublicKey = "K2"
		s.reindex()
	})
	m.must(revokeCmd("a", at.Add(time.Minute)))
	m.must(revokeCmd("x", at.Add(2*time.Minute))) // K2 is listed under x now
	later := at.Add(RevokedRetention + time.Hour)
	m.must(forgetCmd(later, later.Add(-RevokedRetention), "a"))
	var key string
	m.f.Read(func(s *State) { key = s.ForgottenKey("a") })
	if key != "K2" {
		t.Fatalf("a's last key once forgotten: %q, want K2 (its one revoked key, K-a, was its first machine's)", key)
	}
	r := m.must(Command{Op: OpRevoke, At: later, Rules: RulesForgetRevoked, Revoke: &RevokeCmd{Nodes: []string{"a"}}})
	if r.Revoked[0].PublicKey != "K2" {
		t.Fatalf("revoke a run again names %q, want K2", r.Revoked[0].PublicKey)
	}
}
