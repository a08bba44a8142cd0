package daemon

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

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

// TestRevokeOfAControlNodeSaysWhatItIs: `meshctl revoke` of a control node's id says
// it is a control node and that `control remove` takes it out; of a control node
// removed already, that it was (it advised removing it again); an id that is nothing
// keeps "no such node". All not_found (exit 4), nothing revoked.
func TestRevokeOfAControlNodeSaysWhatItIs(t *testing.T) {
	d := fleet(t, 1)
	at := d.now().UTC()
	for _, c := range []state.Command{
		{Op: state.OpCreateToken, At: at, CreateToken: &state.CreateTokenCmd{ID: strings.Repeat("c9", 32), Node: "cp-9", Role: state.RoleControl, TTL: time.Hour,
			Control: &state.ControlAddrs{Broker: "10.9.9.9:7300", Raft: "10.9.9.9:7301", Cluster: "10.9.9.9:7302", Pin: "p9", Operator: "UOP9"}, Sealed: []byte("sealed")}},
		{Op: state.OpEnrol, At: at, Enrol: &state.EnrolCmd{TokenID: strings.Repeat("c9", 32), Node: "cp-9", Role: state.RoleControl, PublicKey: "K9", CurveKey: "X9"}},
		{Op: state.OpRemoveControl, At: at, RemoveControl: &state.RemoveControlCmd{Node: "cp-9"}},
	} {
		if res, err := d.raft.Apply(c, time.Minute); err != nil || res.Err != nil {
			t.Fatalf("%s: %v %v", c.Op, err, res.Err)
		}
	}
	var ae *api.Error
	_, err := d.revoke(api.RevokeRequest{Nodes: []string{d.cfg.Node, "cp-9", "ghost"}})
	if !errors.As(err, &ae) || ae.Code != api.CodeNotFound ||
		!strings.Contains(ae.Message, d.cfg.Node+": a control node, not a host: `meshctl control remove NODE`") ||
		!strings.Contains(ae.Message, "cp-9: a control node removed from the mesh already") || strings.Contains(ae.Message, "cp-9: a control node, not a host") ||
		!strings.Contains(ae.Message, "no such node: ghost") || !strings.HasSuffix(ae.Message, "; nothing was revoked, of the 3 nodes named (a revocation is all or none)") {
		t.Fatalf("revoke %s cp-9 ghost: %v", d.cfg.Node, err)
	}
	// One unknown node alone: nothing revoked, said so too.
	if _, err := d.revoke(api.RevokeRequest{Nodes: []string{"ghost"}}); !errors.As(err, &ae) || ae.Code != api.CodeNotFound || ae.Message != "no such node: ghost; nothing was revoked" {
		t.Fatalf("revoke ghost: %v", err)
	}
}

// TestADeclarationMatchingNoNodeSaysWhereToLook (a newcomer's audit): the guide's
// `declare --label tier=web` after minting web-1 without a label said only "matches
// no enrolled, unrevoked node". It names where the labels are shown and how one is
// given, and that nothing was declared; an unknown node id says where ids are.
func TestADeclarationMatchingNoNodeSaysWhereToLook(t *testing.T) {
	d := fleet(t, 1)
	body := json.RawMessage(`{"files":[]}`)
	var ae *api.Error
	_, err := d.declare(api.DeclareRequest{Labels: map[string]string{"tier": "web"}, Body: body}, requestCall{})
	if !errors.As(err, &ae) || ae.Code != api.CodeNotFound || !strings.Contains(ae.Message, state.ErrNoTargets.Error()) ||
		!strings.Contains(ae.Message, "meshctl nodes lists the nodes with their role and labels") || !strings.Contains(ae.Message, "meshctl label NODE k=v") ||
		!strings.Contains(ae.Message, "nothing was declared") {
		t.Errorf("a label no node carries: %v", err)
	}
	_, err = d.declare(api.DeclareRequest{Nodes: []string{"ghost"}, Body: body}, requestCall{})
	if !errors.As(err, &ae) || ae.Code != api.CodeNotFound || !strings.Contains(ae.Message, "no such node: ghost (meshctl nodes lists the enrolled ones)") {
		t.Errorf("a node that is none: %v", err)
	}
}

// TestADeclarationThatReachesNoNodeSaysWhy (a walkthrough): `declare --node X` of a
// revoked node, and `--role control`, were told about labels (the generic "matches
// no node" advice). Each says its reason, still no_targets, nothing declared; a
// label nothing carries keeps the generic advice. A body too large to sign says
// how much fits.
func TestADeclarationThatReachesNoNodeSaysWhy(t *testing.T) {
	d := fleet(t, 2)
	if _, err := d.revoke(api.RevokeRequest{Node: "n-0"}); err != nil {
		t.Fatal(err)
	}
	body := json.RawMessage(`{"files":[]}`)
	var ae *api.Error
	for name, c := range map[string]struct {
		req       api.DeclareRequest
		want, not string
	}{
		"a revoked node":  {api.DeclareRequest{Nodes: []string{"n-0"}}, "revoked: n-0 (at ", "meshctl label"},
		"--role control":  {api.DeclareRequest{Role: "control"}, "--role control: control nodes take no declarations", "meshctl label"},
		"a label of none": {api.DeclareRequest{Labels: map[string]string{"tier": "none"}}, "meshctl label NODE k=v gives one a label", "revoked:"},
	} {
		for _, dry := range []bool{false, true} {
			c.req.Body, c.req.DryRun = body, dry
			_, err := d.declare(c.req, requestCall{})
			if !errors.As(err, &ae) || ae.Code != refusal(state.ErrNoTargets).Code ||
				!strings.Contains(ae.Message, c.want) || strings.Contains(ae.Message, c.not) || !strings.HasSuffix(ae.Message, "nothing was declared") {
				t.Errorf("%s (dry run %t): %v, want %s saying %q, not %q", name, dry, err, refusal(state.ErrNoTargets).Code, c.want, c.not)
			}
		}
	}
	d.fsm.Read(func(s *state.State) {
		if v := s.Nodes["n-1"].Declared.Version; v != 0 {
			t.Fatalf("a refused declaration declared n-1 v%d", v)
		}
	})

	half := strings.Repeat("x", 400000)
	big := json.RawMessage(`{"files":[{"path":"a","content":"` + half + `"},{"path":"b","content":"` + half + `"}]}`)
	_, err := d.declare(api.DeclareRequest{All: true, Body: big, DryRun: true}, requestCall{})
	// (1 MiB less the envelope's 4096 bytes of room, three quarters: base64.)
	if !errors.As(err, &ae) || ae.Code != api.CodeBadRequest || !strings.Contains(ae.Message, "at most 783360 bytes of body fit") || !strings.Contains(ae.Message, "bytes smaller") {
		t.Fatalf("a body too large to sign: %v, want bad_request saying what fits", err)
	}
}
