package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/operator"
	"mesh/controlplane/state"
)

// TestDeclareDryRunChangesNothing: a dry run through the real broker answers what
// the declaration would change, node by node, and writes nothing to Raft, assigns
// no version, stores no body and sends nothing on any node's declaration subject;
// it refuses what declare refuses, with the same codes.
func TestDeclareDryRunChangesNothing(t *testing.T) {
	const n = 5
	d := fleet(t, n)
	nc := servedToOperators(t, d)
	got, _ := counter(t, d)
	c := operator.NewClient(nc, 0)

	bodyA := json.RawMessage(`{"files":[{"path":"etc/app.conf","content":"a=1\n"},{"path":"etc/old.conf","content":"o"}]}`)
	bodyB := json.RawMessage(`{"files":[{"path":"etc/app.conf","content":"a=2\n","mode":"0640"},{"path":"etc/new.conf","content":"n"}]}`)
	var real api.DeclareResult
	if err := c.Call(api.OpDeclare, api.DeclareRequest{Nodes: []string{"n-0", "n-1", "n-2"}, Body: bodyA}, &real); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for got.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the real declaration reached %d of 3 nodes", got.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}

	// The real declaration's refusals, before the state is looked at. None writes a
	// log entry: a selector no node matches was one, refused by the state machine.
	idxBefore := lastIndex(d)
	refused := map[string]api.DeclareRequest{
		"bad body":       {All: true, Body: json.RawMessage(`{"files":[{"path":"/abs","content":"x"}]}`)},
		"empty selector": {Body: bodyA},
		"unknown node":   {Nodes: []string{"ghost"}, Body: bodyA},
		"no node":        {Labels: map[string]string{"tier": "none"}, Body: bodyA},
	}
	realCodes := map[string]string{}
	for name, req := range refused {
		var re *api.Error
		if err := c.Call(api.OpDeclare, req, &api.DeclareResult{}); !errors.As(err, &re) {
			t.Fatalf("%s: declare answered %v, want a refusal", name, err)
		}
		realCodes[name] = re.Code
	}
	if idx := lastIndex(d); idx != idxBefore {
		t.Errorf("the refused declarations wrote %d log entries, want none", idx-idxBefore)
	}

	type nodeState struct {
		version uint64
		digest  string
	}
	snapshot := func() (uint64, map[string]nodeState, int) {
		idx := lastIndex(d)
		nodes := map[string]nodeState{}
		var bodies int
		d.fsm.Read(func(s *state.State) {
			for id, nd := range s.Nodes {
				nodes[id] = nodeState{nd.Declared.Version, nd.Declared.BodyDigest}
			}
			bodies = len(s.Bodies)
		})
		return idx, nodes, bodies
	}
	idx0, nodes0, bodies0 := snapshot()
	sent0 := got.Load()

	var dry api.DeclareResult
	if err := c.Call(api.OpDeclare, api.DeclareRequest{All: true, Body: bodyB, DryRun: true}, &dry); err != nil {
		t.Fatal(err)
	}
	p := dry.Plan
	if p == nil || len(dry.Assignments) != 0 {
		t.Fatalf("dry run answered %+v, want a plan and no assignment", dry)
	}
	if p.Nodes != n || p.Changing != n || p.Unchanged != 0 || len(p.Groups) != 2 {
		t.Fatalf("plan = %+v, want %d nodes changing in 2 groups", p, n)
	}
	declared, fresh := p.Groups[0], p.Groups[1]
	if declared.Count != 3 || declared.ChangedCount != 1 || declared.AddedCount != 1 || declared.RemovedCount != 1 ||
		declared.Removed[0].Path != "etc/old.conf" || declared.Changed[0].Path != "etc/app.conf" {
		t.Errorf("the declared nodes' group = %+v", declared)
	}
	for _, a := range declared.Nodes {
		if a.Version != nodes0[a.Node].version+1 {
			t.Errorf("%s would get v%d, want v%d", a.Node, a.Version, nodes0[a.Node].version+1)
		}
	}
	if fresh.Count != 2 || fresh.AddedCount != 2 || fresh.ChangedCount+fresh.RemovedCount != 0 {
		t.Errorf("the undeclared nodes' group = %+v, want everything added", fresh)
	}

	// The same body again: no change for the nodes that hold it.
	if err := c.Call(api.OpDeclare, api.DeclareRequest{Nodes: []string{"n-0", "n-1", "n-2"}, Body: bodyA, DryRun: true}, &dry); err != nil {
		t.Fatal(err)
	}
	if dry.Plan == nil || dry.Plan.Unchanged != 3 || dry.Plan.Changing != 0 {
		t.Errorf("a dry run of the body declared = %+v, want 3 nodes unchanged", dry.Plan)
	}

	// Refusals: the same code as the real declaration's, asked before.
	for name, req := range refused {
		req.DryRun = true
		dryErr := c.Call(api.OpDeclare, req, &api.DeclareResult{})
		var de *api.Error
		if !errors.As(dryErr, &de) || de.Code != realCodes[name] {
			t.Errorf("%s: declare refused with code %q, the dry run with %v; want one code", name, realCodes[name], dryErr)
		}
	}

	// Anything sent would be on its way by now: a real declaration's reached the
	// subscriber within this long above.
	time.Sleep(500 * time.Millisecond)
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	idx1, nodes1, bodies1 := snapshot()
	if idx1 != idx0 {
		t.Errorf("the Raft log went from index %d to %d over the dry runs", idx0, idx1)
	}
	if fmt.Sprint(nodes1) != fmt.Sprint(nodes0) || bodies1 != bodies0 {
		t.Errorf("declared state changed: %v (%d bodies), was %v (%d bodies)", nodes1, bodies1, nodes0, bodies0)
	}
	if s := got.Load(); s != sent0 {
		t.Errorf("%d messages on declaration subjects during the dry runs, want 0", s-sent0)
	}
}

// TestADryRunIsNotLoggedAsAChange: a dry run changes nothing, and is not logged
// as an operator's change; before (a docs walkthrough), it was, `op=declare …
// outcome=done`, as a declaration carried out, which an audit could not tell
// apart. The declaration itself is logged.
func TestADryRunIsNotLoggedAsAChange(t *testing.T) {
	var log lockedBuffer
	d := fleetLogging(t, 1, slog.New(slog.NewTextHandler(&log, nil)))
	c := operator.NewClient(servedToOperators(t, d), 0)
	body := json.RawMessage(`{"files":[{"path":"etc/app.conf","content":"a=1\n"}]}`)
	var dry api.DeclareResult
	if err := c.Call(api.OpDeclare, api.DeclareRequest{All: true, Body: body, DryRun: true}, &dry); err != nil || dry.Plan == nil {
		t.Fatalf("dry run: %+v %v", dry, err)
	}
	// Refused, a dry run is not logged as a change either.
	if err := c.Call(api.OpDeclare, api.DeclareRequest{Nodes: []string{"ghost"}, Body: body, DryRun: true}, &dry); err == nil {
		t.Fatal("a dry run for an unknown node was answered")
	}
	if strings.Contains(log.String(), `msg="operator change"`) {
		t.Fatalf("a dry run was logged as a change:\n%s", log.String())
	}
	if err := c.Call(api.OpDeclare, api.DeclareRequest{All: true, Body: body}, &api.DeclareResult{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), `msg="operator change" op=declare`) {
		t.Fatalf("the declaration is not logged as a change:\n%s", log.String())
	}
}
