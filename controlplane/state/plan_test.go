package state

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// TestPreviewDeclareMatchesApply holds the dry run to the declaration itself: for
// each selector, what PreviewDeclare says (targets, versions, skipped, refusal) is
// what applying the DeclareCmd then does, and the preview changes nothing.
func TestPreviewDeclareMatchesApply(t *testing.T) {
	m := enrolled(t, map[string]string{"web-1": RoleWorker, "web-2": RoleWorker, "cp-1": RoleControl, "gone": RoleWorker})
	m.must(Command{Op: OpLabel, At: t0, Label: &LabelCmd{Node: "web-1", Labels: map[string]string{"tier": "web"}}})
	m.must(revokeCmd("gone", t0.Add(time.Minute)))
	// web-2 reports a version past the one declared, as a host restored ahead of a
	// backup does: its next version counts on from the report.
	m.must(Command{Op: OpStatus, At: t0, Status: &StatusCmd{Reports: []StatusReport{{Node: "web-2", Applied: Applied{HaveApplied: true, Version: 7}}}}})
	sels := []Selector{
		{Nodes: []string{"web-1"}},
		{Nodes: []string{"web-1", "ghost", "gone"}},
		{Nodes: []string{"ghost"}},
		{Role: RoleControl},
		{Labels: map[string]string{"tier": "web"}},
		{All: true},
		{Nodes: []string{"cp-1"}, Role: RoleWorker},
	}
	for i, sel := range sels {
		before := m.snapshot()
		idx := m.f.AppliedIndex()
		var p DeclarePreview
		var perr error
		m.f.Read(func(s *State) { p, perr = s.PreviewDeclare(sel) })
		if m.f.AppliedIndex() != idx || string(m.snapshot()) != string(before) {
			t.Fatalf("%+v: the preview changed the state", sel)
		}
		for _, tg := range p.Targets {
			if _, ok := p.Bodies[tg.BodyDigest]; !ok {
				t.Errorf("%+v: no body for %s's digest %s", sel, tg.Node, tg.BodyDigest)
			}
		}
		r := m.apply(declareCmd(sel, `{"files":[{"path":"motd","content":"x"}]}`, t0.Add(time.Duration(i+2)*time.Minute)))
		if !errors.Is(perr, r.Err) && (perr != nil || r.Err != nil) {
			t.Errorf("%+v: preview err %v, declare err %v", sel, perr, r.Err)
		}
		if !slices.Equal(p.Skipped, r.Skipped) {
			t.Errorf("%+v: preview skipped %v, declare skipped %v", sel, p.Skipped, r.Skipped)
		}
		var got []Assignment
		for _, tg := range p.Targets {
			got = append(got, Assignment{Node: tg.Node, Version: tg.Version})
		}
		if !slices.Equal(got, r.Assignments) {
			t.Errorf("%+v: preview %v, declare assigned %v", sel, got, r.Assignments)
		}
	}
}
