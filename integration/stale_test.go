package integration

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/integration/harness"
)

// TestStaleControlNodeFollowsALeaderItDoesNotKnow: a control node down while other
// control nodes joined comes back to a mesh led by one of them. Its state does not
// list the leader, so its Raft port would refuse the leader's connections (peers
// are checked against the members' pins, docs/decisions/0014), and it would never
// catch up while that node leads. It asks the members it does know which members
// they accept, accepts the leader on their word, and catches up
// (docs/decisions/0015).
//
// Five control nodes, as separate processes: cp-1 (the bootstrap machine) goes
// down; cp-4 and cp-5 join and become voters; the leader is moved to cp-4 or cp-5;
// cp-1 comes back.
func TestStaleControlNodeFollowsALeaderItDoesNotKnow(t *testing.T) {
	t.Parallel()
	cp1 := harness.NewControlPlane(t, bin, "stale")
	cp1.Serve()
	cp2 := joinControl(t, cp1, "cp-2")
	cp3 := joinControl(t, cp1, "cp-3")
	// Minted while the CA holder is up: it will be down when they are used.
	tok4, cp4 := cp1.ControlToken("cp-4")
	tok5, cp5 := cp1.ControlToken("cp-5")
	cp1.Process().Kill()
	cps := map[string]*harness.ControlPlane{"cp-2": cp2, "cp-3": cp3, "cp-4": cp4, "cp-5": cp5}
	for _, j := range []struct {
		cp  *harness.ControlPlane
		tok string
	}{{cp4, tok4}, {cp5, tok5}} {
		harness.Eventually(t, 30*time.Second, "a new control node joins with cp-1 down", func() bool {
			return j.cp.Join(j.tok).Code == 0
		})
		j.cp.Serve()
	}
	// leader is the leader as cp sees it, or "" while it sees none.
	leader := func(cp *harness.ControlPlane) string {
		r := cp.Ctl("nodes", "--json")
		var res api.NodesResult
		if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &res) != nil {
			return ""
		}
		for _, c := range res.Control {
			if c.Raft == api.RaftLeader {
				return c.ID
			}
		}
		return ""
	}
	harness.Eventually(t, 30*time.Second, "cp-4 and cp-5 are voters", func() bool {
		v := controlView(t, cp2)
		return (v["cp-4"].Raft == api.RaftVoter || v["cp-4"].Raft == api.RaftLeader) &&
			(v["cp-5"].Raft == api.RaftVoter || v["cp-5"].Raft == api.RaftLeader)
	})
	// Move the leadership to a node cp-1 never heard of: restart the leader until
	// another takes over that is one of them.
	for try := 0; ; try++ {
		var l string
		harness.Eventually(t, 20*time.Second, "a leader", func() bool { l = leader(cp2); return l != "" })
		if l == "cp-4" || l == "cp-5" {
			t.Logf("%s leads after %d restarts of the leader", l, try)
			break
		}
		if try == 10 {
			t.Fatalf("after %d restarts the leader is still %s", try, l)
		}
		cps[l].Process().Kill()
		harness.Eventually(t, 20*time.Second, "another leader", func() bool {
			now := leader(cps[other(l)])
			return now != "" && now != l
		})
		cps[l].Serve()
	}

	// cp-1 comes back: Serve waits until it answers operators, which needs it to
	// have caught up with the leader.
	cp1.Serve()
	if !strings.Contains(cp1.Process().Output(), "learnt of control nodes ahead of this node's state") {
		t.Errorf("cp-1 caught up without learning of the new members; the test does not show what it means to:\n%s", cp1.Process().Output())
	}
	v := controlView(t, cp1)
	for _, id := range []string{"cp-4", "cp-5"} {
		if _, ok := v[id]; !ok {
			t.Fatalf("cp-1 does not list %s after catching up: %+v", id, v)
		}
	}
}

// other returns a control node id that is not id, among cp-2 … cp-5.
func other(id string) string {
	if id == "cp-2" {
		return "cp-3"
	}
	return "cp-2"
}
