package daemon

import (
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
)

// report records, as a status report does, what node applied and the error it
// reports ("" for none).
func report(t *testing.T, d *Daemon, node string, a state.Applied) {
	t.Helper()
	a.ReportedAt = time.Now().UTC()
	cmd := &state.StatusCmd{Reports: []state.StatusReport{{Node: node, Applied: a}}}
	if res, err := d.raft.Apply(state.Command{Op: state.OpStatus, Status: cmd}, time.Minute); err != nil || res.Err != nil {
		t.Fatalf("status of %s: %v %v", node, err, res.Err)
	}
}

// statusNames counts the nodes meshctl status names as not converged (its
// notConverged, cmd/meshctl): alive, and not converged or stale.
func statusNames(t *testing.T, d *Daemon) int {
	t.Helper()
	res, err := d.nodes(api.NodesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, v := range res.Nodes {
		if v.State == api.StateAlive && (!v.Converged || v.Stale) {
			n++
		}
	}
	return n
}

// TestNodesByErrorCode: mesh_nodes_errors counts the nodes not revoked by the code
// they last reported, converged or not: a failed hook, a failed apply, a converged
// node that refused a forged envelope (which mesh_nodes leaves converged, and so
// silent), each under its code; a code no protocol names under other, so hosts
// cannot make series; a revoked node not at all. Every known code is exported, at
// 0 when no node reports it.
func TestNodesByErrorCode(t *testing.T) {
	d := fleet(t, 6)
	report(t, d, "n-0", state.Applied{HaveApplied: true, ErrorCode: api.StatusHookFailed, ErrorMessage: "hook restart-app: exit status 1"})
	report(t, d, "n-1", state.Applied{ErrorCode: api.StatusApplyFailed, ErrorMessage: "disk full"})
	report(t, d, "n-2", state.Applied{HaveApplied: true, ErrorCode: "untrusted", ErrorMessage: "not signed by the mesh"})
	report(t, d, "n-3", state.Applied{HaveApplied: true, ErrorCode: "zzz_custom"})
	report(t, d, "n-4", state.Applied{HaveApplied: true, ErrorCode: "untrusted"})
	if _, err := d.revoke(api.RevokeRequest{Nodes: []string{"n-4"}}); err != nil {
		t.Fatal(err)
	}
	got := gathered(t, d)["mesh_nodes_errors"]
	want := map[string]float64{api.StatusHookFailed: 1, api.StatusApplyFailed: 1, "untrusted": 1, errorOther: 1, "rolled_back": 0, "wrong_audience": 0}
	for code, n := range want {
		if v, ok := got["code="+code]; !ok || v != n {
			t.Errorf("mesh_nodes_errors{code=%q} = %v (exported: %v), want %v", code, v, ok, n)
		}
	}
	if _, ok := got["code=zzz_custom"]; ok || len(got) != len(nodeErrorCodes())+1 {
		t.Errorf("mesh_nodes_errors has %d series, want the %d codes and other: %v", len(got), len(nodeErrorCodes()), got)
	}
	if conv := gathered(t, d)["mesh_nodes"]["state=converged"]; conv != 2 {
		t.Errorf("mesh_nodes{state=converged} = %v, want 2 (n-2 and n-3 refused junk after they converged)", conv)
	}
}

// TestNodesAliveNotConverged: mesh_nodes{state="alive_not_converged"} counts what
// meshctl status names (exit 5): nodes alive and behind, failing, running their
// hooks or stale; not an offline node behind its declaration, which behind counts
// for as long as it stays off (an alert on behind never clears), nor a node alive
// and converged.
func TestNodesAliveNotConverged(t *testing.T) {
	d := fleet(t, 1) // n-0: enrolled, never connected: offline, behind
	for _, c := range []struct {
		node    string
		applied state.Applied
	}{
		{"ok", state.Applied{HaveApplied: true}},
		{"behind", state.Applied{}},
		{"failing", state.Applied{HaveApplied: true, ErrorCode: api.StatusHookFailed}},
		{"hooks", state.Applied{HaveApplied: true, HooksRunning: true}},
		{"stale", state.Applied{HaveApplied: true, Stale: true}},
	} {
		loggedInAs(t, d, c.node)
		report(t, d, c.node, c.applied)
	}
	deadline := time.Now().Add(10 * time.Second)
	for gathered(t, d)["mesh_nodes"]["state=alive"] != 5 {
		if time.Now().After(deadline) {
			t.Fatalf("the nodes logged in are not alive: %v", gathered(t, d)["mesh_nodes"])
		}
		time.Sleep(20 * time.Millisecond)
	}
	nodes := gathered(t, d)["mesh_nodes"]
	for st, want := range map[string]float64{stateAliveNotConverged: 4, stateBehind: 4, api.StateOffline: 1, stateConverged: 2} {
		if got := nodes["state="+st]; got != want {
			t.Errorf("mesh_nodes{state=%q} = %v, want %v (%v)", st, got, want, nodes)
		}
	}
	if got, status := nodes["state="+stateAliveNotConverged], statusNames(t, d); got != float64(status) {
		t.Errorf("mesh_nodes{state=%q} = %v; meshctl status names %d", stateAliveNotConverged, got, status)
	}
}
