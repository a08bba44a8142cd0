package daemon

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
	"mesh/declarations"
)

func mustBody(t testing.TB, raw string) declarations.Body {
	t.Helper()
	b, err := declarations.ParseBody([]byte(raw))
	if err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	return b
}

func canonicalBody(t testing.TB, raw string) json.RawMessage {
	t.Helper()
	c, err := json.Marshal(mustBody(t, raw))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestDiffBodies: each way a file can differ between the body declared now and the
// new one, and the ways it does not (a default mode written out, the same bytes as
// text or base64).
func TestDiffBodies(t *testing.T) {
	old := mustBody(t, `{"files":[
		{"path":"etc/app.conf","content":"a=1\n","mode":"0640"},
		{"path":"etc/mode.conf","content":"m","mode":"0600"},
		{"path":"etc/owner.conf","content":"o","owner":"app"},
		{"path":"etc/kept.conf","content":"k","owner":"1234","group":"4321"},
		{"path":"etc/same.conf","content":"s"},
		{"path":"etc/b64.bin","content":"hi"},
		{"path":"etc/old.conf","content":"secret-old","mode":"0600"}]}`)
	new := mustBody(t, `{"files":[
		{"path":"etc/new.conf","content":"fresh"},
		{"path":"etc/app.conf","content":"a=2\n","mode":"0644"},
		{"path":"etc/mode.conf","content":"m","mode":"0640"},
		{"path":"etc/owner.conf","content":"o","owner":"web","group":"web"},
		{"path":"etc/kept.conf","content":"k"},
		{"path":"etc/same.conf","content":"s","mode":"0644"},
		{"path":"etc/b64.bin","content_base64":"aGk="}]}`)
	d, err := diffBodies(old, new)
	if err != nil {
		t.Fatal(err)
	}
	wantAdded := []api.PlanFile{{Path: "etc/new.conf", Mode: "0644", Size: 5}}
	wantChanged := []api.PlanChange{
		{Path: "etc/app.conf", What: []string{api.PlanContent, api.PlanMode}, From: api.PlanFile{Mode: "0640", Size: 4}, To: api.PlanFile{Mode: "0644", Size: 4}},
		{Path: "etc/mode.conf", What: []string{api.PlanMode}, From: api.PlanFile{Mode: "0600", Size: 1}, To: api.PlanFile{Mode: "0640", Size: 1}},
		{Path: "etc/owner.conf", What: []string{api.PlanOwner, api.PlanGroupOf}, From: api.PlanFile{Mode: "0644", Size: 1, Owner: "app"},
			To: api.PlanFile{Mode: "0644", Size: 1, Owner: "web", Group: "web"}},
	}
	wantRemoved := []api.PlanFile{{Path: "etc/old.conf", Mode: "0600", Size: 10}}
	if !reflect.DeepEqual(d.added, wantAdded) {
		t.Errorf("added = %+v, want %+v", d.added, wantAdded)
	}
	if !reflect.DeepEqual(d.changed, wantChanged) {
		t.Errorf("changed = %+v, want %+v", d.changed, wantChanged)
	}
	if !reflect.DeepEqual(d.removed, wantRemoved) {
		t.Errorf("removed = %+v, want %+v", d.removed, wantRemoved)
	}
	// An owner and group left out are kept on the host: etc/kept.conf does not
	// change.
	if d.unchanged != 3 {
		t.Errorf("unchanged = %d, want 3 (etc/same.conf, etc/b64.bin, etc/kept.conf)", d.unchanged)
	}

	// Nothing declared yet: everything is added.
	d, err = diffBodies(declarations.Body{}, new)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.added) != len(new.Files) || len(d.changed)+len(d.removed)+d.unchanged != 0 {
		t.Errorf("from the empty body: %+v, want all %d files added", d, len(new.Files))
	}
	// The same body: nothing changes.
	d, err = diffBodies(new, new)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.added)+len(d.changed)+len(d.removed) != 0 || d.unchanged != len(new.Files) {
		t.Errorf("the same body: %+v, want %d unchanged", d, len(new.Files))
	}
}

// TestBuildPlanGroups: nodes whose change is the same share one group, whatever body
// they hold now (two bodies that list the same files in another order are one
// change); groups come largest first; a plan carries no content.
func TestBuildPlanGroups(t *testing.T) {
	newRaw := `{"files":[{"path":"etc/app.conf","content":"TOPSECRET-new"},{"path":"etc/new.conf","content":"n"}]}`
	a := canonicalBody(t, `{"files":[{"path":"etc/app.conf","content":"TOPSECRET-old"},{"path":"etc/old.conf","content":"o"}]}`)
	aReordered := canonicalBody(t, `{"files":[{"path":"etc/old.conf","content":"o"},{"path":"etc/app.conf","content":"TOPSECRET-old"}]}`)
	same := canonicalBody(t, newRaw)
	empty := state.EmptyBody()
	digest := func(b []byte) string { return state.BodyDigest(b) }
	p := state.DeclarePreview{
		Targets: []state.DeclareTarget{
			{Node: "db-1", Version: 3, BodyDigest: digest(same)},
			{Node: "new-1", Version: 1, BodyDigest: digest(empty)},
			{Node: "web-1", Version: 5, BodyDigest: digest(a)},
			{Node: "web-2", Version: 9, BodyDigest: digest(aReordered)},
			{Node: "web-3", Version: 5, BodyDigest: digest(a)},
		},
		Skipped: []string{"gone"},
		Bodies:  map[string]json.RawMessage{digest(same): same, digest(empty): empty, digest(a): a, digest(aReordered): aReordered},
	}
	plan, err := buildPlan(p, mustBody(t, newRaw), digest(same), api.MaxPlanSize)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Nodes != 5 || plan.Changing != 4 || plan.Unchanged != 1 || plan.OtherGroups != 0 || len(plan.Groups) != 3 {
		t.Fatalf("plan = %+v, want 5 nodes, 4 changing, 1 unchanged, in 3 groups", plan)
	}
	web := plan.Groups[0]
	wantNodes := []api.Assignment{{Node: "web-1", Version: 5}, {Node: "web-2", Version: 9}, {Node: "web-3", Version: 5}}
	if web.Count != 3 || !reflect.DeepEqual(web.Nodes, wantNodes) {
		t.Errorf("first group = %+v, want web-1..3 with their versions", web)
	}
	if web.AddedCount != 1 || web.Added[0].Path != "etc/new.conf" || web.ChangedCount != 1 || web.Changed[0].Path != "etc/app.conf" ||
		web.RemovedCount != 1 || web.Removed[0].Path != "etc/old.conf" || web.Unchanged != 0 || web.Truncated {
		t.Errorf("first group's change = %+v", web)
	}
	if g := plan.Groups[1]; g.Count != 1 || g.Nodes[0].Node != "db-1" || g.AddedCount+g.ChangedCount+g.RemovedCount != 0 || g.Unchanged != 2 {
		t.Errorf("second group = %+v, want db-1 with no change", g)
	}
	if g := plan.Groups[2]; g.Count != 1 || g.Nodes[0].Node != "new-1" || g.AddedCount != 2 {
		t.Errorf("third group = %+v, want new-1 with everything added", g)
	}
	if !reflect.DeepEqual(plan.Skipped, []string{"gone"}) {
		t.Errorf("skipped = %v", plan.Skipped)
	}
	js, _ := json.Marshal(plan)
	if strings.Contains(string(js), "TOPSECRET") {
		t.Errorf("the plan carries file content: %s", js)
	}
}

// TestBuildPlanBounded: a fleet of 10,000 nodes, each holding a body of its own,
// gets an answer within the budget whose counts are whole; one group of 10,000
// nodes has its list of nodes cut, its count kept.
func TestBuildPlanBounded(t *testing.T) {
	const fleet = 10000
	newBody := mustBody(t, `{"files":[{"path":"etc/app.conf","content":"x"}]}`)
	p := state.DeclarePreview{Bodies: map[string]json.RawMessage{}}
	for i := range fleet {
		b := canonicalBody(t, fmt.Sprintf(`{"files":[{"path":"etc/own-%05d.conf","content":"o"}]}`, i))
		d := state.BodyDigest(b)
		p.Bodies[d] = b
		p.Targets = append(p.Targets, state.DeclareTarget{Node: fmt.Sprintf("node-%05d", i), Version: 2, BodyDigest: d})
	}
	const budget = 64 << 10
	plan, err := buildPlan(p, newBody, "d", budget)
	if err != nil {
		t.Fatal(err)
	}
	if n := jsonSize(plan); n > budget {
		t.Errorf("the plan is %d bytes, over its %d byte budget", n, budget)
	}
	listed := 0
	for _, g := range plan.Groups {
		listed += g.Count
	}
	if plan.Nodes != fleet || plan.Changing != fleet || listed+plan.OtherNodes != fleet || len(plan.Groups)+plan.OtherGroups != fleet || plan.OtherGroups == 0 {
		t.Errorf("nodes %d, changing %d, listed %d + other %d, groups %d + other %d: want every one of %d counted",
			plan.Nodes, plan.Changing, listed, plan.OtherNodes, len(plan.Groups), plan.OtherGroups, fleet)
	}

	// One change for the whole fleet: one group, its nodes cut to fit.
	same := canonicalBody(t, `{"files":[{"path":"etc/old.conf","content":"o"}]}`)
	d := state.BodyDigest(same)
	p = state.DeclarePreview{Bodies: map[string]json.RawMessage{d: same}}
	for i := range fleet {
		p.Targets = append(p.Targets, state.DeclareTarget{Node: fmt.Sprintf("node-%05d", i), Version: 2, BodyDigest: d})
	}
	plan, err = buildPlan(p, newBody, "d", budget)
	if err != nil {
		t.Fatal(err)
	}
	if n := jsonSize(plan); n > budget {
		t.Errorf("the plan is %d bytes, over its %d byte budget", n, budget)
	}
	if len(plan.Groups) != 1 || plan.Groups[0].Count != fleet || !plan.Groups[0].Truncated ||
		len(plan.Groups[0].Nodes) == 0 || len(plan.Groups[0].Nodes) >= fleet || plan.Groups[0].AddedCount != 1 || len(plan.Groups[0].Added) != 1 {
		t.Errorf("one group of %d nodes: %d groups, first count %d, %d nodes listed, truncated %v",
			fleet, len(plan.Groups), plan.Groups[0].Count, len(plan.Groups[0].Nodes), plan.Groups[0].Truncated)
	}
	// The whole fleet, at the real budget, in one group: the answer stays under it.
	plan, err = buildPlan(p, newBody, "d", api.MaxPlanSize)
	if err != nil {
		t.Fatal(err)
	}
	if n := jsonSize(plan); n > api.MaxPlanSize {
		t.Errorf("the plan is %d bytes, over MaxPlanSize %d", n, api.MaxPlanSize)
	}
}

// TestBuildPlanAgainstABodyOfOlderRules: a node holds a body an older version
// declared, with a path element over 255 bytes that no host could apply and this
// version refuses. The dry run of the body that replaces it (the way out) diffs
// against it as the state holds it, instead of failing.
func TestBuildPlanAgainstABodyOfOlderRules(t *testing.T) {
	long := "etc/" + strings.Repeat("p", 300)
	old := []byte(`{"files":[{"path":"` + long + `","content":"x"}]}`)
	if _, err := declarations.ParseBody(old); err == nil {
		t.Fatal("the old body is accepted by this version: the test needs one it refuses")
	}
	newRaw := `{"files":[{"path":"etc/app.conf","content":"y"}]}`
	d := state.BodyDigest(old)
	p := state.DeclarePreview{
		Targets: []state.DeclareTarget{{Node: "web-1", Version: 2, BodyDigest: d}},
		Bodies:  map[string]json.RawMessage{d: old},
	}
	plan, err := buildPlan(p, mustBody(t, newRaw), "n", api.MaxPlanSize)
	if err != nil {
		t.Fatalf("a dry run replacing a body of older rules: %v", err)
	}
	if len(plan.Groups) != 1 || plan.Groups[0].RemovedCount != 1 || plan.Groups[0].Removed[0].Path != long || plan.Groups[0].AddedCount != 1 {
		t.Fatalf("plan = %+v, want the long path removed and etc/app.conf added", plan)
	}
}
