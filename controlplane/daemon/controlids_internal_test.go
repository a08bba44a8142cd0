package daemon

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
)

// TestLabelsAndDeclarationsOfAControlNodeSaySo (operations audit, finding 5):
// `meshctl label cp-1 a=b` and `declare --node cp-1` said "no such node: cp-1" of a
// control node the operator sees in meshctl nodes, as revoke no longer does. They
// say it is a control node, which takes no labels or declarations, still not_found
// (exit 4), and change nothing; an id that is nothing keeps "no such node", named
// after the control node's when both are given.
func TestLabelsAndDeclarationsOfAControlNodeSaySo(t *testing.T) {
	d := fleet(t, 1)
	cp := d.cfg.Node
	var ae *api.Error
	_, err := d.label(api.LabelRequest{Node: cp, Labels: map[string]string{"a": "b"}})
	if !errors.As(err, &ae) || ae.Code != api.CodeNotFound || !strings.Contains(ae.Message, cp+": a control node, not a host") ||
		!strings.Contains(ae.Message, "take no labels or declarations") || strings.Contains(ae.Message, "no such node") {
		t.Fatalf("label %s: %v, want not_found saying it is a control node", cp, err)
	}
	if _, err := d.label(api.LabelRequest{Node: "ghost", Labels: map[string]string{"a": "b"}}); !errors.As(err, &ae) || ae.Code != api.CodeNotFound ||
		!strings.Contains(ae.Message, "no such node") {
		t.Fatalf("label ghost: %v, want no such node", err)
	}

	body := json.RawMessage(`{"files":[]}`)
	for _, dry := range []bool{false, true} {
		_, err = d.declare(api.DeclareRequest{Nodes: []string{cp, "n-0"}, Body: body, DryRun: dry}, requestCall{})
		if !errors.As(err, &ae) || ae.Code != api.CodeNotFound || !strings.Contains(ae.Message, cp+": a control node, not a host") || strings.Contains(ae.Message, "no such node") {
			t.Fatalf("declare --node %s --node n-0 (dry run %t): %v, want not_found saying it is a control node", cp, dry, err)
		}
	}
	_, err = d.declare(api.DeclareRequest{Nodes: []string{"ghost", cp}, Body: body}, requestCall{})
	if !errors.As(err, &ae) || !strings.Contains(ae.Message, cp+": a control node") || !strings.Contains(ae.Message, "; no such node: ghost") {
		t.Fatalf("declare --node ghost --node %s: %v", cp, err)
	}
	d.fsm.Read(func(s *state.State) {
		if v := s.Nodes["n-0"].Declared.Version; v != 0 {
			t.Fatalf("a refused declaration declared n-0 v%d", v)
		}
	})

	// A removed control node's id: said so, not advised to be removed again.
	s := state.New()
	s.ControlNodes["cp-9"] = &state.ControlNode{ID: "cp-9", Removed: true}
	if e := notAHost(s, []string{"cp-9", "ghost"}, "labels"); e == nil || !strings.Contains(e.Message, "cp-9: a control node removed from the mesh") ||
		!strings.Contains(e.Message, "nothing takes labels under it") || !strings.Contains(e.Message, "no such node: ghost") {
		t.Fatalf("a removed control node's id: %+v", e)
	}
	if e := notAHost(s, []string{"ghost"}, "labels"); e != nil {
		t.Fatalf("an id that is nothing: %+v, want nil (the caller's own no such node)", e)
	}
}
