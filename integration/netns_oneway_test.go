package integration

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/host/link"
	"mesh/integration/harness"
)

// TestOneWayLoss: packets lost one way only, in silence (no reset, no ICMP), as a
// broken NAT, a one-way firewall rule or a flapping link leaves them.
//
//   - What a host's first broker sends it is dropped; what it sends arrives. The
//     agent's data goes unacknowledged, and the kernel closes the connection within
//     TCP_USER_TIMEOUT; the agent takes the next broker and applies what was
//     declared meanwhile.
//   - A host that hears nothing from any control node: `declare --wait` ends when
//     asked and names it, rather than hang.
func TestOneWayLoss(t *testing.T) {
	t.Parallel() // mostly waits (grace periods, timeouts): see TestMain
	n := newNetns(t, "nfo", "TestSilentCutNoticedByTheKernel")
	needNft(t)
	router := n.router("r")
	cps := n.controlPlane3(router, 30, "oneway", "--raft-heartbeat", "500ms", "--reconcile", "1s", "--offline-after", "3s")
	web := n.enrolHost(router, homeName("web", 0, 3), "10.77.41", cps[0], "--heartbeat", "1s", "--return-home", "2s")
	db := n.enrolHost(router, homeName("db", 1, 3), "10.77.42", cps[0], "--heartbeat", "1s", "--return-home", "2s")
	webID, dbID := filepath.Base(web.dir), filepath.Base(db.dir)
	harness.Eventually(t, 30*time.Second, "each host on its first broker", func() bool {
		return connectedTo(web) == cps[0].ip+":7300" && connectedTo(db) == cps[1].ip+":7300"
	})
	body := filepath.Join(t.TempDir(), "b.json")
	declare := func(content string, extra ...string) harness.Result {
		writeFile(t, body, `{"files":[{"path":"state","content":"`+content+`"}]}`)
		return cps[2].ctl(t, append([]string{"declare", "--file", body}, extra...)...)
	}
	applied := func(m *machine, content string) func() bool {
		return func() bool {
			b, _ := os.ReadFile(filepath.Join(m.dir, "managed", "state"))
			return string(b) == content
		}
	}

	// 1. cp-1's packets to web are lost; web's to cp-1 arrive.
	n.drop(router, []string{cps[0].ip}, []string{web.ip})
	cut := time.Now()
	if r := declare("one way", "--node", webID); r.Code != 0 {
		t.Fatalf("declare: %s", r.Combined())
	}
	// Data unacknowledged for UserTimeout closes the connection; a heartbeat leaves
	// every second. Pings alone would take two intervals: 40 s.
	limit := link.UserTimeout + 15*time.Second
	harness.Eventually(t, limit, "web leaves the broker whose packets it no longer gets", func() bool {
		on := connectedTo(web)
		return on != "" && on != cps[0].ip+":7300"
	})
	t.Logf("web left cp-1 after %s, for %s", time.Since(cut).Round(100*time.Millisecond), connectedTo(web))
	harness.Eventually(t, 20*time.Second, "web applies what was declared during the loss", applied(web, "one way"))

	// 2. db hears nothing from any control node: declare --wait names it in time.
	n.drop(router, []string{cps[0].ip, cps[1].ip, cps[2].ip}, []string{db.ip})
	began := time.Now()
	r := declare("unheard", "--node", dbID, "--wait", "8s")
	took := time.Since(began)
	if r.Code != 5 || !strings.Contains(r.Combined(), dbID) || took > 25*time.Second {
		t.Fatalf("declare --wait 8s to a host that hears nothing: exit %d after %s, want 5 naming %s within 25 s:\n%s", r.Code, took.Round(100*time.Millisecond), dbID, r.Combined())
	}
	t.Logf("declare --wait 8s: exit 5 after %s: %s", took.Round(100*time.Millisecond), strings.TrimSpace(r.Stderr))
	n.heal(router)
	harness.Eventually(t, 45*time.Second, "db applies once it hears the mesh again", applied(db, "unheard"))
}

// TestLeaderLostOneWay: what the leader's machine sends the machine of a host's
// broker is lost, in silence; the other way, and everything else, passes. Their route
// closes (its pings go unanswered), and that node hears no leader, while the third
// still follows it: routes do not forward from broker to broker, so nothing of the
// leader reaches the host there. The node sheds its hosts (decision 0023) and the
// host applies what is declared through another broker; the route is back after the
// heal.
func TestLeaderLostOneWay(t *testing.T) {
	t.Parallel() // mostly waits (grace periods, timeouts): see TestMain
	n := newNetns(t, "nfl", "TestHungControlNodeLeftByItsHosts")
	needNft(t)
	router := n.router("r")
	cps := n.controlPlane3(router, 30, "leaderlost", "--raft-heartbeat", "500ms", "--reconcile", "1s", "--offline-after", "3s")
	web := n.enrolHost(router, homeName("web", 0, 3), "10.77.41", cps[0], "--heartbeat", "1s", "--return-home", "2s")
	db := n.enrolHost(router, homeName("db", 1, 3), "10.77.42", cps[0], "--heartbeat", "1s", "--return-home", "2s")
	webID, dbID := filepath.Base(web.dir), filepath.Base(db.dir)
	harness.Eventually(t, 30*time.Second, "each host on its first broker", func() bool {
		return connectedTo(web) == cps[0].ip+":7300" && connectedTo(db) == cps[1].ip+":7300"
	})
	body := filepath.Join(t.TempDir(), "b.json")
	declare := func(content string, extra ...string) harness.Result {
		writeFile(t, body, `{"files":[{"path":"state","content":"`+content+`"}]}`)
		return cps[2].ctl(t, append([]string{"declare", "--file", body}, extra...)...)
	}
	applied := func(m *machine, content string) func() bool {
		return func() bool {
			b, _ := os.ReadFile(filepath.Join(m.dir, "managed", "state"))
			return string(b) == content
		}
	}
	var leader *machine
	for i, c := range nfView(t, cps[2]).Control {
		if c.Raft == api.RaftLeader {
			leader = cps[i]
		}
	}
	victim, victimID, broker := db, dbID, cps[1]
	if leader == cps[1] {
		victim, victimID, broker = web, webID, cps[0]
	}
	full := routesOf(t, broker)
	n.drop(router, []string{leader.ip}, []string{broker.ip})
	cut := time.Now()
	harness.Eventually(t, 20*time.Second, "the route from the leader's broker closes", func() bool { return routesOf(t, broker) < full })
	t.Logf("routes of %s: %d, then %d after %s", broker.ns, full, routesOf(t, broker), time.Since(cut).Round(100*time.Millisecond))
	if r := declare("route lost", "--node", victimID); r.Code != 0 {
		t.Fatalf("declare while the leader's packets to %s are lost: %s", broker.ns, r.Combined())
	}
	harness.Eventually(t, 60*time.Second, victimID+" applies while the leader's packets to its broker are lost", applied(victim, "route lost"))
	t.Logf("%s applied %s after the cut, on %s", victimID, time.Since(cut).Round(100*time.Millisecond), connectedTo(victim))
	n.heal(router)
	harness.Eventually(t, 30*time.Second, "the routes come back after the heal", func() bool { return routesOf(t, broker) == full })
}

// routesOf is m's mesh_broker_routes, read from its metrics endpoint (-1 if unread).
func routesOf(t *testing.T, m *machine) int { return metricOf(t, m, "mesh_broker_routes") }

// metricOf is the value of m's metric name (one without labels), read from its
// metrics endpoint (-1 if unread).
func metricOf(t *testing.T, m *machine, name string) int {
	t.Helper()
	r := m.run(t, "", "curl", "-sf", "http://"+m.ip+":25090/metrics")
	for _, line := range strings.Split(r.Stdout, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err == nil {
				return n
			}
		}
	}
	return -1
}
