package state

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"
	"time"
)

// admitAt is a control node's admission, stamped with rules (0: unstamped).
func admitAt(token, node, key string, at time.Time, rules int) Command {
	c := controlEnrol(token, node, key, "X"+key, at)
	c.Rules = rules
	return c
}

// controlTokenAt records a control token for node whose broker is broker.
func controlTokenAt(id, node, broker, pin string) Command {
	c := controlToken(id, node, pin, "UOP-"+node)
	c.CreateToken.Control.Broker = broker
	return c
}

// serving is the leader's entry for node heard serving, stamped as it proposes it.
func serving(node string, joined, at time.Time) Command {
	return Command{Op: OpControlServing, At: at, Rules: RulesBrokersWhenServing,
		ControlServing: &ControlServingCmd{Node: node, JoinedAt: joined}}
}

// TestAControlNodeIsListedOnceItServes: a control node admitted by a command stamped
// with RulesBrokersWhenServing keeps its pin and addresses (routes and Raft accept it:
// the join needs them) but is not in Brokers, the signed list hosts follow, what
// tokens carry and mesh.json holds, and the membership version stays, until the
// leader's ControlServingCmd says it was heard serving: then it is listed and the
// version grows, once. A node admitted and never heard serving (its join rolled back,
// interrupted, or its serve never started) is never listed, and its removal leaves the
// list as it was. An admission by the older rules (unstamped, while a control node on
// them may run) lists the node at once, as they do, so that nodes of both versions
// sign the same list; ControlServingCmd without the stamp is refused. Throughout, one
// membership version never names two lists.
func TestAControlNodeIsListedOnceItServes(t *testing.T) {
	m := newMachine(t)
	init := initCmd("demo", t0)
	init.Init.Control = ControlNode{ID: "cp-1", Broker: "10.0.0.1:7300", Raft: "10.0.0.1:7301", Cluster: "10.0.0.1:7302", Pin: "p1", Operator: "UOP1"}
	m.must(init)

	signed := map[uint64][]string{} // every version seen, with its list
	check := func(what string, wantBrokers []string, wantVersion uint64) {
		t.Helper()
		s := m.state()
		v, brokers := s.Membership()
		if !slices.Equal(brokers, wantBrokers) || v != wantVersion {
			t.Fatalf("%s: version %d, brokers %v; want version %d, brokers %v", what, v, brokers, wantVersion, wantBrokers)
		}
		if in := s.MembershipInput(); in.Version != v || !slices.Equal(in.Brokers, brokers) {
			t.Fatalf("%s: the signer is given version %d, brokers %v; the state says %d, %v", what, in.Version, in.Brokers, v, brokers)
		}
		if before, ok := signed[v]; ok && !slices.Equal(before, brokers) {
			t.Fatalf("%s: membership version %d names %v, and named %v before: hosts refuse the second as replayed", what, v, brokers, before)
		}
		signed[v] = brokers
	}
	one := []string{"10.0.0.1:7300"}
	v0 := m.state().MembershipVersion
	check("bootstrapped", one, v0)

	// Admitted under the rules: a member for routes and Raft, no broker for hosts.
	m.must(controlTokenAt("ctl2", "cp-2", "10.0.0.2:7300", "p2"))
	joined2 := t0.Add(time.Minute)
	r := m.must(admitAt("ctl2", "cp-2", "K2", joined2, RulesBrokersWhenServing))
	if r.Control == nil || !r.Control.NeverServed {
		t.Fatalf("the admission's result %+v is not marked never served", r.Control)
	}
	check("cp-2 admitted", one, v0)
	s := m.state()
	if pins, _ := s.ControlPins(); !slices.Equal(pins, []string{"p1", "p2"}) {
		t.Fatalf("pins %v: the admitted node's key must be accepted by routes and Raft, as its join needs", pins)
	}
	if n := len(s.ActiveControlNodes()); n != 2 {
		t.Fatalf("%d active control nodes, want 2: the admitted node is a member of the roster", n)
	}
	// A repeat of the admission (the joiner lost its answer) changes nothing.
	if r := m.must(admitAt("ctl2", "cp-2", "K2", joined2.Add(time.Second), RulesBrokersWhenServing)); !r.Repeated {
		t.Fatalf("the repeated admission: %+v, want Repeated", r)
	}
	check("cp-2's admission repeated", one, v0)

	// A snapshot keeps the mark.
	restored := NewFSM()
	if err := restored.Restore(io.NopCloser(bytes.NewReader(m.snapshot()))); err != nil {
		t.Fatal(err)
	}
	restored.Read(func(s *State) {
		if v, b := s.Membership(); v != v0 || !slices.Equal(b, one) {
			t.Fatalf("restored from a snapshot: version %d, brokers %v; want %d, %v", v, b, v0, one)
		}
	})

	// The leader's entry for another machine under the id, and the entry unstamped,
	// are refused and change nothing.
	if r := m.apply(serving("cp-2", joined2.Add(-time.Hour), t0.Add(2*time.Minute))); !errors.Is(r.Err, ErrUnknownNode) {
		t.Fatalf("serving for an admission at another time: %v, want %v", r.Err, ErrUnknownNode)
	}
	unstamped := serving("cp-2", joined2, t0.Add(2*time.Minute))
	unstamped.Rules = 0
	if r := m.apply(unstamped); !errors.Is(r.Err, ErrBadCommand) {
		t.Fatalf("serving unstamped: %v, want %v (only the rules that mark a node never served list it)", r.Err, ErrBadCommand)
	}
	check("refused entries", one, v0)

	// Heard serving: listed, and the version grows with the list.
	r = m.must(serving("cp-2", joined2, t0.Add(2*time.Minute)))
	if r.Repeated || r.Control == nil || r.Control.NeverServed {
		t.Fatalf("serving: %+v", r)
	}
	two := []string{"10.0.0.1:7300", "10.0.0.2:7300"}
	check("cp-2 heard serving", two, v0+1)
	if r := m.must(serving("cp-2", joined2, t0.Add(3*time.Minute))); !r.Repeated {
		t.Fatalf("serving again: %+v, want Repeated", r)
	}
	check("cp-2 heard serving again", two, v0+1)

	// Admitted, and its join rolled back (no entry marks it: only the leader's
	// serving entry lists a node, and it hears none from a node out of Raft):
	// never listed; removed, the list stays.
	m.must(controlTokenAt("ctl3", "cp-3", "10.0.0.3:7300", "p3"))
	m.must(admitAt("ctl3", "cp-3", "K3", t0.Add(4*time.Minute), RulesBrokersWhenServing))
	check("cp-3 admitted, its join rolled back", two, v0+1)
	m.must(Command{Op: OpRemoveControl, At: t0.Add(5 * time.Minute), RemoveControl: &RemoveControlCmd{Node: "cp-3"}})
	check("cp-3 removed", two, v0+2)
	if r := m.apply(serving("cp-3", t0.Add(4*time.Minute), t0.Add(6*time.Minute))); !errors.Is(r.Err, ErrUnknownNode) {
		t.Fatalf("serving for a removed node: %v, want %v", r.Err, ErrUnknownNode)
	}
	check("a removed node's serving entry", two, v0+2)

	// By the older rules (unstamped: a control node on them may run), listed at
	// once, as a node of the older version lists it.
	m.must(controlTokenAt("ctl4", "cp-4", "10.0.0.4:7300", "p4"))
	r = m.must(admitAt("ctl4", "cp-4", "K4", t0.Add(7*time.Minute), 0))
	if r.Control.NeverServed {
		t.Fatal("an admission by the older rules was marked never served")
	}
	check("cp-4 admitted by the older rules", []string{"10.0.0.1:7300", "10.0.0.2:7300", "10.0.0.4:7300"}, v0+3)
}
