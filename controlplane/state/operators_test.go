package state

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func addOperatorCmd(name, key string, at, expires time.Time) Command {
	return Command{Op: OpAddOperator, At: at, Rules: RulesOperators, AddOperator: &AddOperatorCmd{Name: name, Key: key, Expires: expires, IssuedBy: "cp-1"}}
}

func revokeOperatorsCmd(at time.Time, names ...string) Command {
	return Command{Op: OpRevokeOperators, At: at, Rules: RulesOperators, RevokeOperators: &RevokeOperatorsCmd{Names: names}}
}

// TestOperatorCredentialsAreRecordedAndRevokedByName: one person's credentials are
// recorded under their name; the same record again (its answer lost) is a repeat;
// another key under a name whose credentials are valid is refused; revoked, the key
// is refused at login and the name may be issued anew; a name never recorded
// revokes nothing.
func TestOperatorCredentialsAreRecordedAndRevokedByName(t *testing.T) {
	m := newMachine(t)
	m.must(initCmd("demo", t0))
	year := t0.Add(365 * 24 * time.Hour)
	r := m.must(addOperatorCmd("alice", "UALICE1", t0, year))
	if len(r.Operators) != 1 || r.Operators[0].Name != "alice" || !r.Operators[0].IssuedAt.Equal(t0) || r.Repeated {
		t.Fatalf("recorded: %+v", r)
	}
	if r := m.must(addOperatorCmd("alice", "UALICE1", t0.Add(time.Minute), year)); !r.Repeated {
		t.Fatalf("the same record again: %+v, want Repeated", r)
	}
	if r := m.apply(addOperatorCmd("alice", "UALICE2", t0.Add(time.Minute), year)); !errors.Is(r.Err, ErrOperatorExists) {
		t.Fatalf("another key under alice: %v, want ErrOperatorExists", r.Err)
	}
	if r := m.apply(addOperatorCmd("bob", "UALICE1", t0.Add(time.Minute), year)); !errors.Is(r.Err, ErrBadCommand) {
		t.Fatalf("alice's key under bob: %v, want ErrBadCommand", r.Err)
	}
	m.must(addOperatorCmd("bob", "UBOB1", t0, year))
	if m.f.OperatorRefused("UALICE1") {
		t.Fatal("alice's valid credentials are refused")
	}
	if r := m.apply(revokeOperatorsCmd(t0.Add(time.Hour), "alice", "carol")); !errors.Is(r.Err, ErrUnknownOperator) || !strings.Contains(r.Err.Error(), "carol") {
		t.Fatalf("revoking an unknown name: %v, want ErrUnknownOperator naming it", r.Err)
	}
	if m.f.OperatorRefused("UALICE1") {
		t.Fatal("a refused revocation revoked alice")
	}
	r = m.must(revokeOperatorsCmd(t0.Add(time.Hour), "alice"))
	if len(r.Operators) != 1 || r.Operators[0].Key != "UALICE1" || !r.Operators[0].RevokedAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("revoked: %+v", r.Operators)
	}
	if !m.f.OperatorRefused("UALICE1") || m.f.OperatorRefused("UBOB1") || m.f.OperatorRefused("UNEVER") {
		t.Fatal("refused: want alice's revoked key only")
	}
	// Run again: answered with the record, its time unchanged.
	if r := m.must(revokeOperatorsCmd(t0.Add(2*time.Hour), "alice")); len(r.Operators) != 1 || !r.Operators[0].RevokedAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("revoked again: %+v", r.Operators)
	}
	// The name again, with a new key; the old key stays refused.
	m.must(addOperatorCmd("alice", "UALICE2", t0.Add(3*time.Hour), year))
	if !m.f.OperatorRefused("UALICE1") || m.f.OperatorRefused("UALICE2") {
		t.Fatal("after alice's new credentials: want the old key refused, the new one not")
	}
	if r := m.apply(addOperatorCmd("alice", "UALICE1", t0.Add(4*time.Hour), year)); r.Err == nil {
		t.Fatal("a revoked key was recorded again")
	}
	list := m.state().OperatorList()
	if len(list) != 3 || list[0].Key != "UALICE1" || list[1].Key != "UALICE2" || list[2].Name != "bob" {
		t.Fatalf("list: %+v", list)
	}
	// The record survives a snapshot and its restore.
	f := NewFSM()
	if err := f.Restore(nopCloser{bytes.NewReader(m.snapshot())}); err != nil {
		t.Fatal(err)
	}
	if !f.OperatorRefused("UALICE1") || f.OperatorRefused("UALICE2") {
		t.Fatal("restored: want the revoked key refused")
	}
}

// TestRevokedOperatorsAreKeptWhileTheirCredentialsCouldLogIn: a revoked record is
// dropped only once its credentials expired and OperatorRetention passed, so the key
// is refused as long as its JWT would let it in; an expired one's record likewise.
func TestRevokedOperatorsAreKeptWhileTheirCredentialsCouldLogIn(t *testing.T) {
	m := newMachine(t)
	m.must(initCmd("demo", t0))
	long := t0.Add(2 * 365 * 24 * time.Hour)
	m.must(addOperatorCmd("alice", "UALICE1", t0, long))
	m.must(addOperatorCmd("bob", "UBOB1", t0, t0.Add(24*time.Hour)))
	m.must(revokeOperatorsCmd(t0.Add(time.Hour), "alice"))
	// A year on: bob's expired long ago and his record is gone; alice's revoked
	// key could still log in by its JWT, and stays refused.
	m.must(addOperatorCmd("carol", "UCAROL1", t0.Add(365*24*time.Hour), long))
	if !m.f.OperatorRefused("UALICE1") {
		t.Fatal("a revoked key whose credentials are still valid was forgotten")
	}
	names := map[string]bool{}
	for _, o := range m.state().OperatorList() {
		names[o.Name] = true
	}
	if names["bob"] || !names["alice"] {
		t.Fatalf("kept %v; want alice kept, bob's expired record dropped", names)
	}
	// Past alice's expiry and the retention: dropped.
	m.must(addOperatorCmd("dave", "UDAVE1", long.Add(OperatorRetention+time.Hour), long.Add(OperatorRetention+48*time.Hour)))
	if m.f.OperatorRefused("UALICE1") {
		t.Fatal("a record past its credentials' expiry and the retention was kept")
	}
}

func TestOperatorsAreCapped(t *testing.T) {
	m := newMachine(t)
	m.must(initCmd("demo", t0))
	for i := range MaxOperators {
		m.must(addOperatorCmd(fmt.Sprintf("op-%d", i), fmt.Sprintf("UOP%d", i), t0, t0.Add(time.Hour)))
	}
	if r := m.apply(addOperatorCmd("one-more", "UMORE", t0, t0.Add(time.Hour))); !errors.Is(r.Err, ErrTooManyOperators) {
		t.Fatalf("past the cap: %v", r.Err)
	}
}

// TestOperatorCommandsNeedTheirRules: unstamped, neither command applies (an older
// control node would not know them).
func TestOperatorCommandsNeedTheirRules(t *testing.T) {
	m := newMachine(t)
	m.must(initCmd("demo", t0))
	c := addOperatorCmd("alice", "UALICE1", t0, t0.Add(time.Hour))
	c.Rules = RulesOperators - 1
	if r := m.apply(c); !errors.Is(r.Err, ErrBadCommand) {
		t.Fatalf("unstamped: %v", r.Err)
	}
}

func TestASnapshotWithANullOperatorIsRefused(t *testing.T) {
	m := newMachine(t)
	m.must(initCmd("demo", t0))
	snap := strings.Replace(string(m.snapshot()), `"admin_account"`, `"operators":{"UX":null},"admin_account"`, 1)
	if err := NewFSM().Restore(nopCloser{bytes.NewReader([]byte(snap))}); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("restore: %v, want ErrBadSnapshot", err)
	}
}
