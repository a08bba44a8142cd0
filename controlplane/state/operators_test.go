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
	if refusedOp(m.f, "UALICE1") {
		t.Fatal("alice's valid credentials are refused")
	}
	if r := m.apply(revokeOperatorsCmd(t0.Add(time.Hour), "alice", "carol")); !errors.Is(r.Err, ErrUnknownOperator) || !strings.Contains(r.Err.Error(), "carol") ||
		!strings.Contains(r.Err.Error(), `nothing was revoked, the other names ("alice") included`) {
		t.Fatalf("revoking an unknown name: %v, want ErrUnknownOperator naming it, and saying alice was not revoked (a walkthrough)", r.Err)
	}
	if refusedOp(m.f, "UALICE1") {
		t.Fatal("a refused revocation revoked alice")
	}
	r = m.must(revokeOperatorsCmd(t0.Add(time.Hour), "alice"))
	if len(r.Operators) != 1 || r.Operators[0].Key != "UALICE1" || !r.Operators[0].RevokedAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("revoked: %+v", r.Operators)
	}
	if !refusedOp(m.f, "UALICE1") || refusedOp(m.f, "UBOB1") || refusedOp(m.f, "UNEVER") {
		t.Fatal("refused: want alice's revoked key only")
	}
	// Run again: answered with the record, its time unchanged.
	if r := m.must(revokeOperatorsCmd(t0.Add(2*time.Hour), "alice")); len(r.Operators) != 1 || !r.Operators[0].RevokedAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("revoked again: %+v", r.Operators)
	}
	// The name again, with a new key; the old key stays refused.
	m.must(addOperatorCmd("alice", "UALICE2", t0.Add(3*time.Hour), year))
	if !refusedOp(m.f, "UALICE1") || refusedOp(m.f, "UALICE2") {
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
	if !refusedOp(f, "UALICE1") || refusedOp(f, "UALICE2") {
		t.Fatal("restored: want the revoked key refused")
	}
}

func renewOperatorCmd(name, key string, at, expires time.Time) Command {
	c := addOperatorCmd(name, key, at, expires)
	c.Rules, c.AddOperator.Renew = RulesOperatorRenewal, true
	return c
}

func revokeOperatorKeysCmd(at time.Time, name string, keys ...string) Command {
	c := revokeOperatorsCmd(at, name)
	c.Rules, c.RevokeOperators.Keys = RulesOperatorRenewal, keys
	return c
}

// TestOperatorCredentialsAreRenewedBesideThoseInUse: a name's credentials are
// renewed while they are valid (both valid, two at most), and the older revoked by
// its key alone; a key not recorded under the name revokes nothing. Under the
// rules before renewal, the same commands apply as those rules did: refused, and
// the whole name revoked.
func TestOperatorCredentialsAreRenewedBesideThoseInUse(t *testing.T) {
	m := newMachine(t)
	m.must(initCmd("demo", t0))
	year := t0.Add(365 * 24 * time.Hour)
	m.must(addOperatorCmd("alice", "UALICE1", t0, year))
	m.must(addOperatorCmd("bob", "UBOB1", t0, year))
	r := m.must(renewOperatorCmd("alice", "UALICE2", t0.Add(time.Hour), year.Add(time.Hour)))
	if len(r.Operators) != 1 || r.Operators[0].Key != "UALICE2" || r.Repeated {
		t.Fatalf("renewed: %+v", r)
	}
	if r := m.must(renewOperatorCmd("alice", "UALICE2", t0.Add(2*time.Hour), year.Add(time.Hour))); !r.Repeated {
		t.Fatalf("the same renewal again: %+v, want Repeated", r)
	}
	if refusedOp(m.f, "UALICE1") || refusedOp(m.f, "UALICE2") {
		t.Fatal("want both of alice's credentials valid after the renewal")
	}
	if r := m.apply(renewOperatorCmd("alice", "UALICE3", t0.Add(2*time.Hour), year)); !errors.Is(r.Err, ErrOperatorRenewals) {
		t.Fatalf("a third valid credential under alice: %v, want ErrOperatorRenewals", r.Err)
	}
	for _, keys := range [][]string{{"UBOB1"}, {"UNEVER"}, {"UALICE1", "UBOB1"}} {
		if r := m.apply(revokeOperatorKeysCmd(t0.Add(3*time.Hour), "alice", keys...)); !errors.Is(r.Err, ErrOperatorKeyNotNamed) {
			t.Fatalf("revoking alice's %v: %v, want ErrOperatorKeyNotNamed", keys, r.Err)
		}
	}
	if refusedOp(m.f, "UALICE1") || refusedOp(m.f, "UBOB1") {
		t.Fatal("a refused revocation by key revoked something")
	}
	r = m.must(revokeOperatorKeysCmd(t0.Add(3*time.Hour), "alice", "UALICE1"))
	if len(r.Operators) != 1 || r.Operators[0].Key != "UALICE1" {
		t.Fatalf("revoked by key: %+v", r.Operators)
	}
	if !refusedOp(m.f, "UALICE1") || refusedOp(m.f, "UALICE2") || refusedOp(m.f, "UBOB1") {
		t.Fatal("want alice's older key alone refused")
	}
	// The older revoked, the name has room for the next renewal.
	m.must(renewOperatorCmd("alice", "UALICE3", t0.Add(4*time.Hour), year))
	// A renewal under a name with nothing valid (revoked since it was asked for)
	// records nothing: a revocation is never undone by a renewal in flight (a
	// review).
	m.must(revokeOperatorsCmd(t0.Add(6*time.Hour), "bob"))
	if r := m.apply(renewOperatorCmd("bob", "UBOB2", t0.Add(7*time.Hour), year)); !errors.Is(r.Err, ErrNothingToRenew) || !refusedOp(m.f, "UBOB1") {
		t.Fatalf("a renewal after bob's revocation: %v, want ErrNothingToRenew", r.Err)
	}
	if m.f.OperatorStanding("UBOB2") != OperatorUnrecorded {
		t.Fatal("a refused renewal recorded its key")
	}
	// Without renewal, another key under a valid name is refused as before.
	if r := m.apply(addOperatorCmd("alice", "UALICE4", t0.Add(5*time.Hour), year)); !errors.Is(r.Err, ErrOperatorExists) {
		t.Fatalf("another key under alice without renewal: %v, want ErrOperatorExists", r.Err)
	}

	// The rules before renewal: Renew and Keys are not read.
	old := newMachine(t)
	old.must(initCmd("demo", t0))
	old.must(addOperatorCmd("alice", "UALICE1", t0, year))
	renew := renewOperatorCmd("alice", "UALICE2", t0.Add(time.Hour), year)
	renew.Rules = RulesOperators
	if r := old.apply(renew); !errors.Is(r.Err, ErrOperatorExists) {
		t.Fatalf("a renewal by the rules before it: %v, want ErrOperatorExists", r.Err)
	}
	old.must(addOperatorCmd("alice2", "UALICE2", t0, year))
	byKey := revokeOperatorKeysCmd(t0.Add(time.Hour), "alice", "UNEVER")
	byKey.Rules = RulesOperators
	if r := old.must(byKey); len(r.Operators) != 1 || !refusedOp(old.f, "UALICE1") {
		t.Fatalf("a revocation by key by the rules before it: %+v, want the name revoked", r.Operators)
	}
}

// TestRevokedOperatorsAreKeptWhileTheirCredentialsCouldLogIn: a revoked record is
// kept until OperatorRetention after its credentials expire, so its key stays
// refused by the record wherever a broker's clock runs behind (a review: the record
// went at the expiry, and a broker behind admitted the key by its JWT); an expired,
// unrevoked one is dropped ExpiredOperatorRetention after it expires.
func TestRevokedOperatorsAreKeptWhileTheirCredentialsCouldLogIn(t *testing.T) {
	m := newMachine(t)
	m.must(initCmd("demo", t0))
	long := t0.Add(2 * 365 * 24 * time.Hour)
	m.must(addOperatorCmd("alice", "UALICE1", t0, long))
	m.must(addOperatorCmd("bob", "UBOB1", t0, t0.Add(24*time.Hour)))
	m.must(revokeOperatorsCmd(t0.Add(time.Hour), "alice"))
	names := func() map[string]bool {
		out := map[string]bool{}
		for _, o := range m.state().OperatorList() {
			out[o.Name] = true
		}
		return out
	}
	// Bob's expired a day ago: still listed.
	m.must(addOperatorCmd("carol", "UCAROL1", t0.Add(48*time.Hour), long))
	if !names()["bob"] {
		t.Fatal("an expired record was dropped within ExpiredOperatorRetention")
	}
	// A week and more after: gone. Alice's revoked key stays refused.
	m.must(addOperatorCmd("dave", "UDAVE1", t0.Add(24*time.Hour+ExpiredOperatorRetention+time.Hour), long))
	if got := names(); got["bob"] || !got["alice"] {
		t.Fatalf("kept %v; want alice kept, bob's expired record dropped", got)
	}
	// A second after alice's credentials expire: still refused by the record.
	m.must(addOperatorCmd("erin", "UERIN1", long.Add(time.Second), long.Add(48*time.Hour)))
	if m.f.OperatorStanding("UALICE1") != OperatorRevokedByName {
		t.Fatal("a revoked record was dropped as its credentials expired")
	}
	// Past the expiry and the retention: dropped.
	m.must(addOperatorCmd("frank", "UFRANK1", long.Add(OperatorRetention+time.Hour), long.Add(OperatorRetention+48*time.Hour)))
	if m.f.OperatorStanding("UALICE1") == OperatorRevokedByName {
		t.Fatal("a record past its credentials' expiry and the retention was kept")
	}
}

// TestARefusedOperatorCommandChangesNothing: a command refused leaves the state as
// it was, records due to be dropped included.
func TestARefusedOperatorCommandChangesNothing(t *testing.T) {
	m := newMachine(t)
	m.must(initCmd("demo", t0))
	m.must(addOperatorCmd("bob", "UBOB1", t0, t0.Add(time.Hour)))
	before := m.snapshot()
	late := t0.Add(ExpiredOperatorRetention + 2*time.Hour)
	if r := m.apply(revokeOperatorsCmd(late, "carol")); r.Err == nil {
		t.Fatal("revoking an unknown name was not refused")
	}
	if r := m.apply(addOperatorCmd("bob", "UBOB1", late, late.Add(-time.Minute))); r.Err == nil {
		t.Fatal("an expired record was not refused")
	}
	if !bytes.Equal(before, m.snapshot()) {
		t.Fatal("refused commands changed the state")
	}
	// A record due is not revoked by name: it is as good as gone.
	if r := m.apply(revokeOperatorsCmd(late, "bob")); !errors.Is(r.Err, ErrUnknownOperator) {
		t.Fatalf("revoking a record due to be dropped: %v", r.Err)
	}
}

// TestOperatorStandingAtLogin: recorded keys are admitted, revoked ones refused,
// and keys neither a control node's nor recorded by name are refused, unless some
// control node's key was never recorded (a mesh from before it was), when the
// state cannot tell.
func TestOperatorStandingAtLogin(t *testing.T) {
	m := newMachine(t)
	init := initCmd("demo", t0)
	init.Init.Control = ControlNode{ID: "cp-1", Operator: "UCP1"}
	m.must(init)
	m.must(addOperatorCmd("alice", "UALICE1", t0, t0.Add(time.Hour)))
	m.must(addOperatorCmd("bob", "UBOB1", t0, t0.Add(time.Hour)))
	m.must(revokeOperatorsCmd(t0, "bob"))
	for key, want := range map[string]OperatorStanding{"UCP1": OperatorRecorded, "UALICE1": OperatorRecorded, "UBOB1": OperatorRevokedByName, "UOTHER": OperatorUnrecorded} {
		if got := m.f.OperatorStanding(key); got != want {
			t.Errorf("%s: %v, want %v", key, got, want)
		}
	}
	if r := m.apply(addOperatorCmd("cp", "UCP1", t0, t0.Add(time.Hour))); !errors.Is(r.Err, ErrBadCommand) {
		t.Fatalf("a control node's own key recorded by name: %v", r.Err)
	}
	legacy := newMachine(t)
	old := initCmd("demo", t0)
	old.Init.Control = ControlNode{ID: "cp-1"}
	legacy.must(old)
	if got := legacy.f.OperatorStanding("UOTHER"); got != OperatorRecorded {
		t.Fatalf("a mesh whose control node's key is not recorded: %v, want admitted", got)
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

func refusedOp(f *FSM, key string) bool { return f.OperatorStanding(key) == OperatorRevokedByName }
