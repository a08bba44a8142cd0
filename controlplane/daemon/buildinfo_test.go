package daemon

import (
	"context"
	"log/slog"
	"testing"
)

// TestBuildInfoAndLeaderChanges: a control node's metrics name the build serving,
// version and commit, from before it is open (while it waits for a quorum, when an
// operator most wants to know what runs there) and after; and count the leaders it
// learnt of: a lone node that elected itself, one.
func TestBuildInfoAndLeaderChanges(t *testing.T) {
	d, err := Open(context.Background(), Options{Dir: bootstrapped(t, "build"), Logger: slog.New(slog.DiscardHandler),
		Version: "0.1.0+git20261203145709.7132ef2931ef", Revision: "7132ef2931ef0123",
		Timeouts: testTimeouts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	want := "mesh=build,node=cp-1,revision=7132ef2931ef0123,version=0.1.0+git20261203145709.7132ef2931ef"
	if got := gathered(t, d)["mesh_build_info"]; len(got) != 1 || got[want] != 1 {
		t.Errorf("mesh_build_info %v, want {%s} 1", got, want)
	}
	fams, err := d.startingRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	starting := map[string]bool{}
	for _, f := range fams {
		starting[f.GetName()] = true
	}
	if !starting["mesh_build_info"] || !starting["mesh_raft_leader_changes_total"] {
		t.Errorf("a node waiting for its state does not export its build and its leader changes: %v", starting)
	}
	if got := gathered(t, d)["mesh_raft_leader_changes_total"][""]; got != 1 {
		t.Errorf("mesh_raft_leader_changes_total = %v on a lone node that elected itself, want 1", got)
	}
	if got := orUnknown(""); got != "unknown" {
		t.Errorf("a build with no commit recorded is labelled %q, want unknown", got)
	}
}
