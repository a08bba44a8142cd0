package daemon

import (
	"encoding/json"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
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
		res, err := d.declare(api.DeclareRequest{Nodes: []string{"n-0", "n-1"}, Body: json.RawMessage(body)}, requestCall{})
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

// TestProgressSaysATargetWasRevoked: a target revoked while `declare --wait` waits on
// it was reported offline, and the wait went on to its deadline and then called it
// offline. It is revoked, with the time, a node it had converged on stays converged,
// and the others stand as before.
func TestProgressSaysATargetWasRevoked(t *testing.T) {
	d := fleet(t, 3)
	res, err := d.declare(api.DeclareRequest{Nodes: []string{"n-0", "n-1", "n-2"}, Body: json.RawMessage(`{"files":[{"path":"app.conf","content":"A"}]}`)}, requestCall{})
	if err != nil {
		t.Fatal(err)
	}
	// n-2 applied its version before the revocations.
	var v2 uint64
	for _, a := range res.Assignments {
		if a.Node == "n-2" {
			v2 = a.Version
		}
	}
	if r, err := d.raft.Apply(state.Command{Op: state.OpStatus, Status: &state.StatusCmd{Reports: []state.StatusReport{
		{Node: "n-2", Applied: state.Applied{HaveApplied: true, Version: v2}}}}}, time.Minute); err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	for _, n := range []string{"n-0", "n-2"} {
		if _, err := d.revoke(api.RevokeRequest{Node: n}); err != nil {
			t.Fatal(err)
		}
	}
	out, err := d.progress(api.ProgressRequest{Targets: res.Assignments, Body: res.Body})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]api.TargetProgress{}
	for _, p := range out.Others {
		got[p.Node] = p
	}
	if p := got["n-0"]; p.State != api.ProgressRevoked || p.RevokedAt.IsZero() {
		t.Errorf("n-0, revoked: %+v, want revoked with its time", p)
	}
	if p := got["n-1"]; p.State != api.ProgressOffline {
		t.Errorf("n-1, not connected: %+v, want offline", p)
	}
	if _, listed := got["n-2"]; listed || out.Converged != 1 {
		t.Errorf("n-2, applied before its revocation: %+v, %d converged; want converged", got["n-2"], out.Converged)
	}
}
