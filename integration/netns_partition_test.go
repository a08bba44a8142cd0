package integration

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/integration/harness"
)

// TestMinorityPartition: three control nodes on three machines; the leader's machine
// loses the other two (the router drops their packets both ways, without a reset)
// while every host still reaches every control node. The old leader steps down; the
// host whose first broker it is moves to the majority and applies what is declared
// there; meshctl on either side says what is true; and once the partition heals,
// everything converges without a hand step, the host back on its first broker.
func TestMinorityPartition(t *testing.T) {
	t.Parallel() // mostly waits (grace periods, timeouts): see TestMain
	n := newNetns(t, "nfp", "TestHighAvailability")
	needNft(t)
	router := n.router("r")
	cps := n.controlPlane3(router, 10, "minority", "--raft-heartbeat", "500ms", "--reconcile", "1s", "--offline-after", "3s")
	var leader int
	for i, c := range nfView(t, cps[0]).Control {
		if c.Raft == api.RaftLeader {
			leader = i // the roster lists the control nodes as they joined
		}
	}
	minority := cps[leader]
	var majority []*machine
	for i, m := range cps {
		if i != leader {
			majority = append(majority, m)
		}
	}
	// One host whose first broker is the leader's, one whose is another's.
	stranded := homeName("web", leader, 3)
	other := homeName("app", (leader+1)%3, 3)
	hosts := map[string]*machine{}
	for i, name := range []string{stranded, other} {
		hosts[name] = n.enrolHost(router, name, []string{"10.77.21", "10.77.22"}[i], majority[0], "--heartbeat", "1s", "--return-home", "2s")
	}
	harness.Eventually(t, 30*time.Second, "each host on its first broker", func() bool {
		return connectedTo(hosts[stranded]) == minority.ip+":7300" && connectedTo(hosts[other]) == cps[(leader+1)%3].ip+":7300"
	})
	body := filepath.Join(t.TempDir(), "b.json")
	declare := func(from *machine, content string, nodes ...string) harness.Result {
		writeFile(t, body, `{"files":[{"path":"state","content":"`+content+`"}]}`)
		args := []string{"declare", "--file", body}
		for _, id := range nodes {
			args = append(args, "--node", id)
		}
		return from.ctl(t, args...)
	}
	applied := func(name, content string) func() bool {
		return func() bool {
			b, _ := os.ReadFile(filepath.Join(hosts[name].dir, "managed", "state"))
			return string(b) == content
		}
	}
	if r := declare(majority[0], "before", stranded, other); r.Code != 0 {
		t.Fatalf("declare: %s", r.Combined())
	}
	harness.Eventually(t, 30*time.Second, "both apply before the partition", func() bool {
		return applied(stranded, "before")() && applied(other, "before")()
	})

	// The partition: the leader's machine and the other two control nodes' lose
	// each other; hosts reach all three.
	var majIPs []string
	for _, m := range majority {
		majIPs = append(majIPs, m.ip)
	}
	n.drop(router, []string{minority.ip}, majIPs)
	n.drop(router, majIPs, []string{minority.ip})
	cut := time.Now()

	// The majority elects a leader of its own and serves.
	harness.Eventually(t, 30*time.Second, "a leader on the majority side", func() bool {
		for _, c := range nfView(t, majority[0], "--leader-wait", "1s", "--timeout", "3s").Control {
			if c.Raft == api.RaftLeader && c.Broker != minority.ip+":7300" {
				return true
			}
		}
		return false
	})
	t.Logf("majority leader after %s", time.Since(cut).Round(100*time.Millisecond))
	// The old leader stepped down: its own view of itself is no longer leader.
	harness.Eventually(t, 20*time.Second, "the minority's leader steps down", func() bool {
		r := minority.ctl(t, "control", "status", "--json")
		return !strings.Contains(r.Stdout, `"raft_state": "leader"`) && !strings.Contains(r.Stdout, `"state": "Leader"`)
	})
	t.Logf("minority stepped down after %s", time.Since(cut).Round(100*time.Millisecond))

	// Declared on the majority: both hosts apply it, the stranded one by leaving
	// the broker that cannot reach the leader.
	r := declare(majority[0], "during", stranded, other)
	if r.Code == 3 {
		// Sent while the majority's brokers still routed to the old leader's API
		// (their routes to it close 6-8 s after the cut): lost with the route, as
		// docs/operations.md says. meshctl said so; the operator sends it again.
		t.Logf("declare on the majority, within the routes' grace: %s", r.Combined())
		r = declare(majority[0], "during", stranded, other)
	}
	if r.Code != 0 {
		t.Fatalf("declare on the majority: %s", r.Combined())
	}
	harness.Eventually(t, 60*time.Second, other+" applies during the partition", applied(other, "during"))
	harness.Eventually(t, 45*time.Second, stranded+", on the cut-off node, moves to the majority and applies", applied(stranded, "during"))
	t.Logf("%s applied what the majority declared %s after the cut, on %s", stranded, time.Since(cut).Round(100*time.Millisecond), connectedTo(hosts[stranded]))
	if on := connectedTo(hosts[stranded]); on == minority.ip+":7300" {
		t.Fatalf("%s applied the declaration while connected to the cut-off node", stranded)
	}
	if v := metricOf(t, minority, "mesh_broker_shedding_hosts"); v != 1 {
		t.Errorf("the cut-off node's mesh_broker_shedding_hosts = %d, want 1", v)
	}
	if v := metricOf(t, majority[0], "mesh_broker_shedding_hosts"); v != 0 {
		t.Errorf("a majority node's mesh_broker_shedding_hosts = %d, want 0", v)
	}

	// A new host enrols during the partition, with a token whose first broker may
	// be the cut-off node's (they are listed as the control nodes joined): that one
	// refuses it at once, and another admits it.
	newcomer := n.behind(router, "new-1", "10.77.23")
	tok := majority[0].ctl(t, "token", "--node", "new-1")
	began := time.Now()
	if r := newcomer.run(t, tok.Stdout, bin.Meshhost, "enrol", "--state", newcomer.dir); r.Code != 0 || time.Since(began) > 15*time.Second {
		t.Fatalf("enrol during the partition: exit %d after %s:\n%s", r.Code, time.Since(began), r.Combined())
	}
	t.Logf("new-1 enrolled during the partition in %s", time.Since(began).Round(100*time.Millisecond))

	// meshctl on the majority side tells the truth: both hosts alive, the cut-off
	// node offline. On the minority side it says that nothing serves, in bounded time.
	// The stranded host's report of what it applied may still be on its way to the
	// leader (through its new broker's route) on a loaded machine: status is asked
	// until it tells the truth, for as long as a report may take.
	statusTrue := func() bool {
		r = majority[1].ctl(t, "status")
		return r.Code == 0 && regexpLine(r.Stdout, stranded+` .*alive`) && regexpLine(r.Stdout, other+` .*alive`) && regexpLine(r.Stdout, `cp-\d.*offline`)
	}
	if deadline := time.Now().Add(15 * time.Second); !statusTrue() {
		for !statusTrue() && time.Now().Before(deadline) {
			time.Sleep(500 * time.Millisecond)
		}
		if r.Code != 0 || !regexpLine(r.Stdout, stranded+` .*alive`) || !regexpLine(r.Stdout, other+` .*alive`) || !regexpLine(r.Stdout, `cp-\d.*offline`) {
			t.Errorf("meshctl status on the majority side, for 15 s: exit %d, want 0, both hosts alive and the cut-off node offline:\n%s", r.Code, r.Combined())
		}
	}
	began = time.Now()
	r = minority.ctl(t, "status", "--leader-wait", "2s")
	if r.Code != 3 || !strings.Contains(r.Combined(), "no control node answered") || time.Since(began) > 20*time.Second {
		t.Errorf("meshctl status on the cut-off node: exit %d after %s, want 3 \"no control node answered\" within 20 s:\n%s", r.Code, time.Since(began), r.Combined())
	}
	r = minority.ctl(t, "control", "status")
	if r.Code != 3 || !strings.Contains(r.Stdout, "no leader") || !strings.Contains(r.Stdout, "partition") {
		t.Errorf("meshctl control status on the cut-off node: exit %d, want 3, \"no leader\" and the partition it may be:\n%s", r.Code, r.Combined())
	}
	t.Logf("meshctl control status on the cut-off node:\n%s", r.Combined())

	n.heal(router)
	healed := time.Now()
	harness.Eventually(t, 60*time.Second, "the stranded host applies after the heal", applied(stranded, "during"))
	harness.Eventually(t, 30*time.Second, "the old leader admits hosts again", func() bool {
		return metricOf(t, minority, "mesh_broker_shedding_hosts") == 0
	})
	if r := declare(minority, "after", stranded, other); r.Code != 0 {
		t.Fatalf("declare via the old leader after the heal: %s", r.Combined())
	}
	harness.Eventually(t, 60*time.Second, "both apply after the heal", func() bool {
		return applied(stranded, "after")() && applied(other, "after")()
	})
	harness.Eventually(t, 60*time.Second, "each host on its first broker again", func() bool {
		return connectedTo(hosts[stranded]) == minority.ip+":7300" && connectedTo(hosts[other]) == cps[(leader+1)%3].ip+":7300"
	})
	t.Logf("converged %s after the heal", time.Since(healed).Round(100*time.Millisecond))
}

// regexpLine reports whether some line of s matches expr.
func regexpLine(s, expr string) bool { return regexp.MustCompile(`(?m)^.*` + expr).MatchString(s) }
