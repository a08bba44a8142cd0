package integration

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/integration/harness"
)

// TestAVoterWhoseRaftPortIsBlockedIsNamed (audit of the control plane's ordinary
// weeks, finding 2): a voter whose Raft port a firewall blocks answers on the
// brokers as any other. `meshctl nodes` showed it "voter alive", `meshctl control
// status` said "every member answered" and exited 0, so the documented gate before
// the next restart passed, and that restart stopped the control plane. Three control
// nodes on machines behind a router that drops, in silence, what goes to one
// follower's Raft port: control status exits 5 naming it (its own answer: a
// candidate, or no leader), nodes shows it "alive, not following" once six of its
// heartbeats in a row said so; with the rule removed, control status exits 0 again
// and nodes shows it alive.
func TestAVoterWhoseRaftPortIsBlockedIsNamed(t *testing.T) {
	t.Parallel() // mostly waits: see TestMain
	n := newNetns(t, "nff", "TestControlStatusNamesVotersThatDoNotFollow (meshctl) and TestNotFollowingTakesSixHeartbeatsInARow (daemon)")
	needNft(t)
	router := n.router("r")
	cps := n.controlPlane3(router, 100, "follow", "--raft-heartbeat", "500ms", "--reconcile", "1s")
	leader := -1
	for i, c := range nfView(t, cps[0]).Control {
		if c.Raft == api.RaftLeader {
			leader = i // the roster lists the control nodes as they joined
		}
	}
	if leader < 0 {
		t.Fatal("no leader in the roster")
	}
	asker, cut := cps[leader], cps[(leader+1)%3]
	cutID := fmt.Sprintf("cp-%d", (leader+1)%3+1)
	status := func() (harness.Result, map[string]string) {
		r := asker.ctl(t, "control", "status", "--json")
		var s struct {
			NotFollowing map[string]string `json:"not_following"`
		}
		json.Unmarshal([]byte(r.Stdout), &s)
		return r, s.NotFollowing
	}
	harness.Eventually(t, 30*time.Second, "control status exits 0 with every voter following", func() bool {
		r, _ := status()
		return r.Code == 0
	})

	n.nft(router, fmt.Sprintf(`table ip nffollow {
	chain raft {
		type filter hook forward priority 0; policy accept;
		ip daddr %s tcp dport 7301 drop
	}
}
`, cut.ip))
	healed := false
	heal := func() {
		if !healed {
			healed = true
			if out, err := exec.Command("ip", in(router, "nft", "delete", "table", "ip", "nffollow")...).CombinedOutput(); err != nil {
				t.Errorf("nft delete table in %s: %v %s", router, err, out)
			}
		}
	}
	t.Cleanup(heal) // the namespaces go too; the rule first, should one outlive it

	until(t, "control status names the voter whose Raft port is blocked, exit 5", 30*time.Second, func() string {
		r, notFollowing := status()
		if r.Code != 5 || notFollowing[cutID] == "" || len(notFollowing) != 1 || !strings.Contains(r.Stderr, "voters not following the leader") {
			return fmt.Sprintf("exit %d, not following %v:\n%s", r.Code, notFollowing, r.Combined())
		}
		return ""
	})
	r := asker.ctl(t, "control", "status")
	if r.Code != 5 || !strings.Contains(r.Stdout, "; not following it: "+cutID+" (") || strings.Contains(r.Stdout, "every member answered") {
		t.Fatalf("control status as text (exit %d):\n%s", r.Code, r.Combined())
	}
	t.Logf("meshctl control status with %s's Raft port blocked:\n%s", cutID, r.Combined())

	// The roster: alive by its heartbeats, not following by them, after six.
	row := regexp.MustCompile(`(?m)^` + cutID + `( \(CA\))?\s+voter\s+alive, not following\s`)
	until(t, "nodes shows it alive, not following", 40*time.Second, func() string {
		for _, c := range nfView(t, asker).Control {
			if c.ID == cutID && (c.State != api.StateAlive || c.NotFollowing == "" || c.NotFollowingSince.IsZero()) {
				return fmt.Sprintf("%s: %s, not following %q since %v", c.ID, c.State, c.NotFollowing, c.NotFollowingSince)
			}
		}
		if r := asker.ctl(t, "nodes"); !row.MatchString(r.Stdout) {
			return r.Combined()
		}
		return ""
	})

	heal()
	until(t, "control status exits 0 once the rule is gone", 60*time.Second, func() string {
		r, notFollowing := status()
		if r.Code != 0 || len(notFollowing) != 0 {
			return fmt.Sprintf("exit %d, not following %v:\n%s", r.Code, notFollowing, r.Combined())
		}
		for _, c := range nfView(t, asker).Control {
			if c.NotFollowing != "" {
				return c.ID + " still not following: " + c.NotFollowing
			}
		}
		return ""
	})
}
