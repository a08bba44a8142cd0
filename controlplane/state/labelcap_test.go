package state

import (
	"errors"
	"fmt"
	"testing"
)

// TestALabelChangeIsCappedAsItCommits: two label changes the leader looked at
// against the same state (another operator's committed between its look and this
// one's commit, or a new leader had one pending), each within the cap alone.
// Stamped RulesLabelCap, the second is refused as it applies and changes nothing;
// on older rules Max is ignored and the node goes past it, as every node on those
// rules does alike. A node past the cap may lose labels, or change values.
func TestALabelChangeIsCappedAsItCommits(t *testing.T) {
	labels := func(n, from int) map[string]string {
		m := map[string]string{}
		for i := range n {
			m[fmt.Sprintf("k%d", from+i)] = "v"
		}
		return m
	}
	label := func(rules int, l map[string]string) Command {
		return Command{Op: OpLabel, At: t0, Rules: rules, Label: &LabelCmd{Node: "web-1", Labels: l, Max: 8}}
	}
	count := func(m *machine) (n int) {
		m.f.Read(func(s *State) { n = len(s.Nodes["web-1"].Labels) })
		return n
	}

	m := enrolled(t, map[string]string{"web-1": RoleWorker})
	m.must(label(RulesLabelCap, labels(6, 0)))
	m.must(label(RulesLabelCap, labels(2, 6)))
	r := m.apply(label(RulesLabelCap, labels(2, 8)))
	if !errors.Is(r.Err, ErrTooManyLabels) {
		t.Fatalf("a change past the cap under rules %d: %v, want ErrTooManyLabels", RulesLabelCap, r.Err)
	}
	if got := count(m); got != 8 {
		t.Fatalf("web-1 carries %d labels after the refused change, want 8 (nothing changed)", got)
	}
	m.must(label(RulesLabelCap, map[string]string{"k0": "", "k100": "v"})) // one out, one in
	m.must(label(RulesLabelCap, map[string]string{"k1": "changed"}))

	older := enrolled(t, map[string]string{"web-1": RoleWorker})
	older.must(label(RulesForgetRevoked, labels(6, 0)))
	older.must(label(RulesForgetRevoked, labels(6, 6)))
	if got := count(older); got != 12 {
		t.Fatalf("under rules %d web-1 carries %d labels, want 12 (Max ignored, as older code does)", RulesForgetRevoked, got)
	}
	older.must(label(RulesLabelCap, map[string]string{"k0": ""}))
	older.must(label(RulesLabelCap, map[string]string{"k1": "changed"}))
	if r := older.apply(label(RulesLabelCap, map[string]string{"k0": "v"})); !errors.Is(r.Err, ErrTooManyLabels) {
		t.Fatalf("adding to a node past the cap: %v, want ErrTooManyLabels", r.Err)
	}
	if got := count(older); got != 11 {
		t.Fatalf("web-1 carries %d labels, want 11", got)
	}
}
