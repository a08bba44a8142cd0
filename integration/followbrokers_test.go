package integration

import (
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/host/state"
	"mesh/integration/harness"
)

// TestAHostFollowsTheBrokersItIsSent: a host enrolled through the bootstrap
// machine (its identity names that broker alone), started once that machine was
// lost and removed, through --broker to a control node X, holds the mesh's new
// list of brokers from X. Then X is removed while the host is connected to it.
// Before, the agent dialled the brokers it started with alone (nats.go keeps them,
// and X's INFO took the others it had discovered away as X's routes closed): the
// lost machine and X, for as long as it ran, with the two other control nodes up
// and in its state. Now the list it accepted is the connection's: it reaches
// another broker and converges. The built binaries, four control nodes so that
// three remain.
func TestAHostFollowsTheBrokersItIsSent(t *testing.T) {
	t.Parallel() // mostly waits (joins, removals, reconnections): see TestMain
	cp1 := harness.NewControlPlane(t, bin, "follow")
	cp1.Serve()
	h := harness.NewHost(t, bin, "web-1")
	if r := h.Enrol(cp1.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol (exit %d):\n%s", r.Code, r.Combined())
	}
	others := []*harness.ControlPlane{joinControl(t, cp1, "cp-2"), joinControl(t, cp1, "cp-3"), joinControl(t, cp1, "cp-4")}
	cp1.Process().Signal(syscall.SIGKILL)
	cp1.Process().Wait(10 * time.Second)
	if r := others[0].Ctl("control", "remove", "cp-1"); r.Code != 0 {
		t.Fatalf("control remove cp-1 (exit %d):\n%s", r.Code, r.Combined())
	}
	// X: a control node that does not lead, so that it can be removed.
	ids := []string{"cp-2", "cp-3", "cp-4"}
	var x, leader *harness.ControlPlane
	var xID string
	harness.Eventually(t, 20*time.Second, "a leader among cp-2, cp-3, cp-4", func() bool {
		view := controlView(t, others[0])
		x, leader = nil, nil
		for i, cp := range others {
			if view[ids[i]].Raft == api.RaftLeader {
				leader = cp
			} else if x == nil {
				x, xID = cp, ids[i]
			}
		}
		return leader != nil && x != nil
	})
	h.Run("--broker", x.Listen)
	harness.Eventually(t, 30*time.Second, "the host holds the list of cp-2, cp-3 and cp-4", func() bool {
		st, err := state.Load(h.State)
		if err != nil || len(st.Brokers) != 3 {
			return false
		}
		for _, cp := range others {
			if !slices.Contains(st.Brokers, cp.Listen) {
				return false
			}
		}
		return true
	})
	if r := leader.Ctl("control", "remove", xID); r.Code != 0 {
		t.Fatalf("control remove %s (exit %d):\n%s", xID, r.Code, r.Combined())
	}
	if code := x.Process().Wait(30 * time.Second); code != 6 {
		t.Fatalf("the removed %s exited %d, want 6", xID, code)
	}
	body := filepath.Join(t.TempDir(), "b.json")
	writeFile(t, body, `{"files":[{"path":"etc/after.conf","content":"moved\n"}]}`)
	if r := leader.Ctl("declare", "--node", "web-1", "--file", body, "--wait", "60s"); r.Code != 0 {
		t.Fatalf("declare to the host once its broker was removed (exit %d, want 0: it reached another broker):\n%s\nagent:\n%s",
			r.Code, r.Combined(), h.Process().Output())
	}
	// `nodes web-1` shows that node alone (it printed the control nodes' table too).
	if r := leader.Ctl("nodes", "web-1"); r.Code != 0 || !strings.Contains(r.Stdout, "web-1") || strings.Contains(r.Stdout, "CONTROL") {
		t.Errorf("nodes web-1 (exit %d):\n%s", r.Code, r.Stdout)
	}
}
