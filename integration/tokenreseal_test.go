package integration

import (
	"strings"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/integration/harness"
)

// TestControlTokenMintedBeforeTheLeaderJoined: a control token minted while the
// bootstrap machine was the only control node is used while a node that joined
// after it leads. Each joining node took, from its admitter, a copy of the token's
// identity sealed to its own curve key, so the leader hands the identity over; the
// joiner reaches it through the bootstrap machine's broker, the only one its token
// names, and the leader, not that machine, admits it.
func TestControlTokenMintedBeforeTheLeaderJoined(t *testing.T) {
	cp1 := harness.NewControlPlane(t, bin, "reseal")
	cp1.Serve()
	early, cp4 := cp1.ControlToken("cp-4")
	cp2 := joinControl(t, cp1, "cp-2")
	cp3 := joinControl(t, cp1, "cp-3")

	// Leadership moves to cp-2 or cp-3; cp-1 comes back as a follower.
	cp1.Process().Kill()
	cp1.Process().Wait(10 * time.Second)
	leader := func(via *harness.ControlPlane) string {
		for id, c := range controlView(t, via) {
			if c.Raft == api.RaftLeader {
				return id
			}
		}
		return ""
	}
	harness.Eventually(t, 20*time.Second, "cp-2 or cp-3 leads", func() bool {
		l := leader(cp2)
		return l == "cp-2" || l == "cp-3"
	})
	cp1.Serve()
	before := leader(cp1)
	if before == "cp-1" || before == "" {
		t.Fatalf("the leader is %q once cp-1 is back; the test needs cp-2 or cp-3 to lead", before)
	}

	r := cp4.Join(early)
	if r.Code != 0 {
		t.Fatalf("join cp-4 with a token minted before %s joined, while it leads (exit %d):\n%s", before, r.Code, r.Combined())
	}
	if after := leader(cp3); after != before {
		t.Logf("leadership moved from %s to %s during the join", before, after)
	}
	cp4.Serve()
	harness.Eventually(t, 20*time.Second, "cp-4 serves in the mesh", func() bool {
		c, ok := controlView(t, cp4)["cp-4"]
		return ok && c.State == api.StateAlive && c.Raft != api.RaftRemoved && c.Raft != api.RaftNotMember
	})
	if r := cp2.Ctl("token", "list"); r.Code != 0 || !strings.Contains(r.Stdout, "cp-4") || !strings.Contains(r.Stdout, "used") {
		t.Fatalf("token list after the join (exit %d):\n%s", r.Code, r.Combined())
	}
}
