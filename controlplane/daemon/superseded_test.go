package daemon

import (
	"encoding/json"
	"testing"

	"mesh/controlplane/api"
)

// TestProgressSaysWhenADeclarationWasSuperseded: a node declared another body since
// the declaration `declare --wait` follows is superseded, naming the later version,
// not counted converged on it once it applies the later one (two operators declaring
// at once were each told "converged", the node holding one body). The same body
// declared again supersedes nothing, and a request that names no body (a meshctl
// older than it) is answered as before.
func TestProgressSaysWhenADeclarationWasSuperseded(t *testing.T) {
	d := fleet(t, 2)
	declare := func(body string) api.DeclareResult {
		t.Helper()
		res, err := d.declare(api.DeclareRequest{Nodes: []string{"n-0", "n-1"}, Body: json.RawMessage(body)})
		if err != nil {
			t.Fatal(err)
		}
		if res.Body == "" || len(res.Assignments) != 2 {
			t.Fatalf("declare answered %+v: want two assignments and the body's digest", res)
		}
		return res
	}
	a := declare(`{"files":[{"path":"app.conf","content":"A"}]}`)
	progress := func(res api.DeclareResult, body string) map[string]api.TargetProgress {
		t.Helper()
		out, err := d.progress(api.ProgressRequest{Targets: res.Assignments, Body: body})
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]api.TargetProgress{}
		for _, p := range out.Others {
			m[p.Node] = p
		}
		return m
	}
	for node, p := range progress(a, a.Body) {
		if p.State == api.ProgressSuperseded {
			t.Fatalf("%s superseded with nothing declared since: %+v", node, p)
		}
	}
	b := declare(`{"files":[{"path":"app.conf","content":"B"}]}`)
	got := progress(a, a.Body)
	for _, as := range b.Assignments {
		if p := got[as.Node]; p.State != api.ProgressSuperseded || p.Version != as.Version {
			t.Errorf("%s after another body: %+v, want superseded by v%d", as.Node, p, as.Version)
		}
	}
	for node, p := range progress(a, "") {
		if p.State == api.ProgressSuperseded {
			t.Errorf("a request naming no body: %s superseded", node)
		}
	}
	again := declare(`{"files":[{"path":"app.conf","content":"B"}]}`)
	if again.Body != b.Body {
		t.Fatalf("the same body has two digests: %s, %s", b.Body, again.Body)
	}
	for node, p := range progress(b, b.Body) {
		if p.State == api.ProgressSuperseded {
			t.Errorf("the same body declared again: %s superseded", node)
		}
	}
}
