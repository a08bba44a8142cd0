package state

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// twoControlNodes is a mesh bootstrapped by cp-1 (pin p1, operator UOP1) that
// admitted cp-2 (p2, UOP2) a minute later.
func twoControlNodes(t *testing.T) *machine {
	t.Helper()
	m := newMachine(t)
	init := initCmd("demo", t0)
	init.Init.Control = ControlNode{ID: "cp-1", Broker: "10.0.0.1:7300", Raft: "10.0.0.1:7301", Cluster: "10.0.0.1:7302", Pin: "p1", Operator: "UOP1"}
	m.must(init)
	m.must(controlToken("ctl", "cp-2", "p2", "UOP2"))
	m.must(controlEnrol("ctl", "cp-2", "K2", "XC2", t0.Add(time.Minute)))
	return m
}

// controlToken records a control token for node, with the pin and operator key the
// CA holder issued for it.
func controlToken(id, node, pin, operator string) Command {
	return Command{Op: OpCreateToken, At: t0, CreateToken: &CreateTokenCmd{ID: id, Node: node, Role: RoleControl, TTL: time.Hour,
		Control: &ControlAddrs{Broker: "10.0.0.2:7300", Raft: "10.0.0.2:7301", Cluster: "10.0.0.2:7302", Pin: pin, Operator: operator},
		Sealed:  []byte("sealed")}}
}

func controlEnrol(id, node, key, curve string, at time.Time) Command {
	return Command{Op: OpEnrol, At: at, Enrol: &EnrolCmd{TokenID: id, Node: node, Role: RoleControl, PublicKey: key, CurveKey: curve}}
}

// TestControlIdentityRecordedAndRevoked: an admitted control node carries the pin of
// its TLS key and its operator key from the token; the pins of the active nodes are
// what routes and Raft accept, and a removal takes the node's pin out and keeps its
// operator key as revoked, even after a new machine joins under the same id.
func TestControlIdentityRecordedAndRevoked(t *testing.T) {
	m := twoControlNodes(t)

	s := m.state()
	if cn := s.ControlNodes["cp-2"]; cn.Pin != "p2" || cn.Operator != "UOP2" {
		t.Fatalf("admitted control node %+v: pin and operator key not taken from the token", cn)
	}
	if pins, unpinned := s.ControlPins(); !slices.Equal(pins, []string{"p1", "p2"}) || len(unpinned) != 0 {
		t.Fatalf("pins %v, unpinned %v; want [p1 p2] and none", pins, unpinned)
	}

	m.must(Command{Op: OpRemoveControl, At: t0.Add(2 * time.Minute), RemoveControl: &RemoveControlCmd{Node: "cp-2"}})
	s = m.state()
	if pins, _ := s.ControlPins(); !slices.Equal(pins, []string{"p1"}) {
		t.Fatalf("after the removal the pins are %v; the removed node's key is still accepted", pins)
	}
	if node, ok := s.RevokedOperators["UOP2"]; !ok || node != "cp-2" {
		t.Fatalf("revoked operators %v: the removed node's credentials are not revoked", s.RevokedOperators)
	}
	if _, ok := s.RevokedOperators["UOP1"]; ok {
		t.Fatal("the active node's operator credentials were revoked")
	}

	// A new machine under the id: its own pin and key; the old key stays revoked.
	m.must(controlToken("ctl2", "cp-2", "p2b", "UOP2B"))
	m.must(controlEnrol("ctl2", "cp-2", "K2B", "XC2B", t0.Add(3*time.Minute)))
	s = m.state()
	if pins, _ := s.ControlPins(); !slices.Equal(pins, []string{"p1", "p2b"}) {
		t.Fatalf("pins %v after the id was given to a new machine", pins)
	}
	if _, ok := s.RevokedOperators["UOP2"]; !ok {
		t.Fatal("the new record under the id forgot that the old machine's credentials are revoked")
	}
	if _, ok := s.Clone().RevokedOperators["UOP2"]; !ok {
		t.Fatal("Clone dropped the revoked operator keys")
	}
}

// TestControlPinsOfOlderMembers: a control node recorded before pins were is listed
// as unpinned, so that nothing is checked against an incomplete list.
func TestControlPinsOfOlderMembers(t *testing.T) {
	m := newMachine(t)
	init := initCmd("demo", t0)
	init.Init.Control = ControlNode{ID: "cp-1", Broker: "10.0.0.1:7300", Raft: "10.0.0.1:7301", Cluster: "10.0.0.1:7302"}
	m.must(init)
	m.must(controlToken("ctl", "cp-2", "p2", "UOP2"))
	m.must(controlEnrol("ctl", "cp-2", "K2", "XC2", t0.Add(time.Minute)))
	if pins, unpinned := m.state().ControlPins(); !slices.Equal(pins, []string{"p2"}) || !slices.Equal(unpinned, []string{"cp-1"}) {
		t.Fatalf("pins %v, unpinned %v; want [p2] and [cp-1]", pins, unpinned)
	}
}

// TestControlAdmissionRepeat: the answer to a control admission seals the signing
// keys to the admitted machine's curve key, so a repeat (the first answer was lost)
// is answered only for that machine, and only while it is a member. A removed node
// that kept its token cannot come back for the keys rotated after its removal.
func TestControlAdmissionRepeat(t *testing.T) {
	m := newMachine(t)
	m.must(initCmd("demo", t0))
	m.must(controlToken("ctl", "cp-2", "p2", "UOP2"))
	m.must(controlEnrol("ctl", "cp-2", "K2", "XC2", t0.Add(time.Minute)))
	if r := m.apply(controlEnrol("ctl", "cp-2", "K2", "XC2", t0.Add(2*time.Minute))); r.Err != nil || r.Control == nil || r.Control.CurveKey != "XC2" {
		t.Fatalf("repeat by the admitted machine: %+v", r)
	}
	if r := m.apply(controlEnrol("ctl", "cp-2", "K2", "XOTHER", t0.Add(2*time.Minute))); !errors.Is(r.Err, ErrTokenUsed) {
		t.Fatalf("repeat naming another curve key: %v, want ErrTokenUsed", r.Err)
	}
	m.must(controlToken("ctl3", "cp-3", "p3", "UOP3"))
	m.must(controlEnrol("ctl3", "cp-3", "K3", "XC3", t0.Add(2*time.Minute)))
	m.must(Command{Op: OpRemoveControl, At: t0.Add(3 * time.Minute), RemoveControl: &RemoveControlCmd{Node: "cp-2"}})
	if r := m.apply(controlEnrol("ctl", "cp-2", "K2", "XC2", t0.Add(4*time.Minute))); !errors.Is(r.Err, ErrTokenUsed) {
		t.Fatalf("repeat by the removed node: %v, want ErrTokenUsed", r.Err)
	}
}

// TestControlAdmissionResumedAfterExpiry: the machine a control token admitted,
// resuming a join that did not complete after the token expired, was refused
// ErrTokenUsed, "this token already enrolled a node; mint a new token": it had
// enrolled this very machine, and a new token is refused while the node is
// admitted (node_exists). It is now ErrTokenExpiredAdmitted (code token_expired),
// saying when it admitted the node and expired and that the node must be removed
// first; nothing changes in the state. Another key, or a node removed since, is
// refused as used, as before.
func TestControlAdmissionResumedAfterExpiry(t *testing.T) {
	m := newMachine(t)
	m.must(initCmd("demo", t0))
	m.must(controlToken("ctl", "cp-2", "p2", "UOP2")) // expires at t0 + 1h
	m.must(controlEnrol("ctl", "cp-2", "K2", "XC2", t0.Add(time.Minute)))
	before := m.state()
	late := t0.Add(2 * time.Hour)
	r := m.apply(controlEnrol("ctl", "cp-2", "K2", "XC2", late))
	if !errors.Is(r.Err, ErrTokenExpiredAdmitted) || errors.Is(r.Err, ErrTokenUsed) || r.Control != nil {
		t.Fatalf("the admitted machine after expiry: %+v, want ErrTokenExpiredAdmitted", r)
	}
	for _, says := range []string{"meshctl control remove cp-2", t0.Add(time.Hour).UTC().Format(time.RFC3339), "same --data directory"} {
		if !strings.Contains(r.Err.Error(), says) {
			t.Errorf("the refusal does not say %q: %v", says, r.Err)
		}
	}
	// (An expired token's sealed identity is dropped as any command applies past
	// its expiry: not this refusal's doing.)
	if after := m.state(); !reflect.DeepEqual(after.ControlNodes, before.ControlNodes) || after.MembershipVersion != before.MembershipVersion ||
		after.Tokens["ctl"].UsedAt != before.Tokens["ctl"].UsedAt || after.Tokens["ctl"].UsedKey != "K2" {
		t.Fatal("the refused repeat changed the state")
	}
	// Another machine's key: used, and told that cp-2 stays admitted until it is
	// removed ("mint a new token" alone met node_exists: a docs walkthrough).
	if r := m.apply(controlEnrol("ctl", "cp-2", "K9", "XC9", late)); !errors.Is(r.Err, ErrTokenUsed) || !strings.Contains(r.Err.Error(), "remove it first (meshctl control remove cp-2)") {
		t.Fatalf("another key after expiry: %v, want ErrTokenUsed saying to remove cp-2 first", r.Err)
	}
	m.must(controlToken("ctl3", "cp-3", "p3", "UOP3"))
	m.must(controlEnrol("ctl3", "cp-3", "K3", "XC3", t0.Add(2*time.Minute)))
	m.must(Command{Op: OpRemoveControl, At: t0.Add(3 * time.Minute), RemoveControl: &RemoveControlCmd{Node: "cp-2"}})
	if r := m.apply(controlEnrol("ctl", "cp-2", "K2", "XC2", late)); !errors.Is(r.Err, ErrTokenUsed) || strings.Contains(r.Err.Error(), "control remove") {
		t.Fatalf("the removed node after expiry: %v, want ErrTokenUsed without the removal (a new token can be minted now)", r.Err)
	}
	// cp-2 admitted again since, on another machine: the first machine's old
	// token is not told to remove cp-2, which would take out the new machine
	// (found by an audit).
	m.must(controlToken("ctl2", "cp-2", "pB", "UOPB"))
	m.must(controlEnrol("ctl2", "cp-2", "KB", "XCB", t0.Add(4*time.Minute)))
	if r := m.apply(controlEnrol("ctl", "cp-2", "K2", "XC2", late)); !errors.Is(r.Err, ErrTokenUsed) || errors.Is(r.Err, ErrTokenExpiredAdmitted) {
		t.Fatalf("the first machine's token after cp-2 was admitted on another: %v, want ErrTokenUsed", r.Err)
	}
}

// TestControlAdmissionRepeatChangesNothing: a repeated admission says so, and moves
// no membership version, so that a joiner retrying does not make the control plane
// send hosts the same list of brokers again each time.
func TestControlAdmissionRepeatChangesNothing(t *testing.T) {
	m := newMachine(t)
	m.must(initCmd("demo", t0))
	m.must(controlToken("ctl", "cp-2", "p2", "UOP2"))
	if r := m.must(controlEnrol("ctl", "cp-2", "K2", "XC2", t0.Add(time.Minute))); r.Repeated {
		t.Fatal("the first admission is marked repeated")
	}
	v, _ := m.state().Membership()
	if r := m.must(controlEnrol("ctl", "cp-2", "K2", "XC2", t0.Add(2*time.Minute))); !r.Repeated {
		t.Fatal("a repeated admission is not marked repeated")
	}
	if v2, _ := m.state().Membership(); v2 != v {
		t.Fatalf("a repeated admission moved the membership from %d to %d", v, v2)
	}
}

// TestBootstrapCAHolderIsTheMachineNotTheID: the bootstrap machine was given the CA
// key, and the state names it by id; once it is removed, or another machine joined
// under its id, the record names nobody (the replacement does not hold the key
// unless it says so itself), also after a snapshot is restored.
func TestBootstrapCAHolderIsTheMachineNotTheID(t *testing.T) {
	m := twoControlNodes(t)
	restored := func() *State {
		r := newMachine(t)
		if err := r.f.Restore(io.NopCloser(bytes.NewReader(m.snapshot()))); err != nil {
			t.Fatal(err)
		}
		return r.state()
	}
	if got, again := m.state().BootstrapCAHolder(), restored().BootstrapCAHolder(); got != "cp-1" || again != "cp-1" {
		t.Fatalf("the bootstrap machine, a member: %q, after a restore %q; want cp-1", got, again)
	}

	m.must(Command{Op: OpRemoveControl, At: t0.Add(2 * time.Minute), RemoveControl: &RemoveControlCmd{Node: "cp-1"}})
	if got := m.state().BootstrapCAHolder(); got != "" {
		t.Fatalf("the bootstrap machine removed: %q, want none", got)
	}
	m.must(controlToken("ctl2", "cp-1", "p1b", "UOP1B"))
	m.must(controlEnrol("ctl2", "cp-1", "K1B", "XC1B", t0.Add(3*time.Minute)))
	if got, again := m.state().BootstrapCAHolder(), restored().BootstrapCAHolder(); got != "" || again != "" {
		t.Fatalf("another machine under the bootstrap machine's id: %q, after a restore %q; want none", got, again)
	}
	if s := m.state(); s.CAHolder != "cp-1" {
		t.Fatalf("the recorded id changed: %q", s.CAHolder)
	}
}
