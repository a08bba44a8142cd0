package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"mesh/broker"
	"mesh/controlplane/api"
	"mesh/integration/harness"
	"mesh/tokenfmt"
)

// TestAFullControlNodeStillServesOperators: a fleet larger than a control node's
// open-file limit. Every connection is a descriptor, and a fleet that took them all
// left nats-server failing every accept ("too many open files"): `meshctl` could not
// reach the control plane, which looked stopped. Now the broker holds as many hosts as
// the limit allows, less room for operators and the process (broker.CapacityFor), and
// refuses the rest, who keep trying: operators are answered, a declaration commits and
// reaches the hosts connected, a token used while the node is full is not spent, and a
// host refused comes in once another leaves.
//
// serve runs with an open-file limit of 64, about 15 of them its own files and
// listeners: it keeps 32 for itself and 16 sockets for operators, and holds 16 hosts.
// 52 agents run, more than the limit leaves sockets for.
func TestAFullControlNodeStillServesOperators(t *testing.T) {
	const openFiles, hostRoom, agents = 64, 16, 52
	cp := harness.NewControlPlane(t, bin, "full")
	serve := cp.ServeWithOpenFiles(openFiles)
	defer func() {
		if t.Failed() {
			t.Logf("serve's descriptors ran out %d times", strings.Count(serve.Output(), "too many open files"))
		}
	}()
	serve.WaitOutput(t, "max_hosts=16", 5*time.Second)

	hosts := make([]*harness.Host, agents)
	for i := range hosts {
		hosts[i] = harness.NewHost(t, bin, fmt.Sprintf("h-%02d", i))
		if r := hosts[i].Enrol(cp.Token(hosts[i].Name)); r.Code != 0 {
			t.Fatalf("enrol %s: exit %d:\n%s", hosts[i].Name, r.Code, r.Combined())
		}
	}
	late := harness.NewHost(t, bin, "late")
	lateToken := cp.Token(late.Name)
	for _, h := range hosts {
		h.Run()
	}
	alive := func() (n int, ids map[string]bool) {
		ids = map[string]bool{}
		for _, v := range cp.Nodes().Nodes {
			if v.State == api.StateAlive {
				ids[v.ID] = true
			}
		}
		return len(ids), ids
	}
	// The agents all start at once: until that storm settles, their handshakes can
	// hold every socket (nats-server counts a connection from its accept), and an
	// operator may have to try again. Then operators are answered every time.
	harness.Eventually(t, 30*time.Second, "operators answered, the fleet connected as far as it can", func() bool {
		if cp.Ctl("nodes").Code != 0 {
			return false
		}
		n, _ := alive()
		return n >= hostRoom
	})
	time.Sleep(2 * time.Second) // the agents left out try again meanwhile
	for range 5 {
		start := time.Now()
		if r := cp.Ctl("nodes"); r.Code != 0 {
			t.Fatalf("meshctl nodes on a full control node: exit %d:\n%s", r.Code, r.Combined())
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("meshctl nodes on a full control node took %s", d)
		}
	}
	if open := cp.Counter("process_open_fds"); open == 0 || open > openFiles-8 {
		t.Errorf("serve holds %v descriptors of its %d", open, openFiles)
	}
	full := broker.RefusalCode(broker.ErrFull)
	// The cap is exact, however many hosts log in at the same moment: each is
	// counted as it is admitted. Before, hosts logging in together each found the
	// last place free, and up to 29 of these 52 were let in.
	n, in := alive()
	if refused := cp.Counter("mesh_broker_connections_refused_total", "reason="+full); n != hostRoom || refused == 0 {
		t.Fatalf("%d hosts alive, %v refused for a full node; want %d, some", n, refused, hostRoom)
	}
	if held := cp.Counter("mesh_broker_host_connections"); int(held) != n {
		t.Errorf("mesh_broker_host_connections %v, with %d hosts alive", held, n)
	}
	body := t.TempDir() + "/b.json"
	writeFile(t, body, `{"files":[{"path":"f","content":"full\n"}]}`)
	if r := cp.Ctl("declare", "--all", "--file", body); r.Code != 0 {
		t.Fatalf("declare on a full control node: exit %d:\n%s", r.Code, r.Combined())
	}
	harness.Eventually(t, 30*time.Second, "every host connected applies the declaration", func() bool {
		done := 0
		for _, v := range cp.Nodes().Nodes {
			if in[v.ID] && v.Applied != nil && *v.Applied == v.Declared && v.Declared > 0 {
				done++
			}
		}
		return done == len(in)
	})

	// A host enrolling meanwhile is refused, and its token is not spent.
	if r := late.Enrol(lateToken, "--timeout", "5s"); r.Code == 0 {
		t.Fatalf("a host enrolled on a full control node:\n%s", r.Combined())
	}

	// Room made: the hosts connected stop, and those refused but hostRoom-1. Each
	// of these comes in and applies its declaration, and the token refused before
	// is still good.
	var waiting []*harness.Host
	for _, h := range hosts {
		if !in[h.Name] && len(waiting) < hostRoom-1 {
			waiting = append(waiting, h)
		} else {
			h.Process().Kill()
		}
	}
	for _, h := range waiting {
		cp.WaitConverged(h.Name, 1, 60*time.Second)
	}
	if r := late.Enrol(lateToken); r.Code != 0 {
		t.Fatalf("the token refused while the node was full, once there is room: exit %d:\n%s", r.Code, r.Combined())
	}

}

// TestAFullControlNodeSendsHostsToAnother: two control nodes, the first holding one
// host at most (--max-hosts 1). Agents that try it first when it is full go to the
// other; an enrolment whose token names it first is refused there and enrols through
// the other; every host is alive and applies a declaration.
func TestAFullControlNodeSendsHostsToAnother(t *testing.T) {
	cp1 := harness.NewControlPlane(t, bin, "spill")
	cp1.Serve("--max-hosts", "1")
	cp2 := joinControl(t, cp1, "cp-2")
	// A control node that refuses a host for room sends it on to cp-2, which must
	// know its token by then: a token pasted moments after it was minted could beat
	// its replication.
	replicated := func() {
		t.Helper()
		minted := cp1.Counter("mesh_raft_commit_index")
		harness.Eventually(t, 10*time.Second, "cp-2 applied the tokens", func() bool {
			return cp2.Counter("mesh_raft_applied_index") >= minted
		})
	}
	hosts := make([]*harness.Host, 6)
	tokens := make([]string, len(hosts))
	for i := range hosts {
		hosts[i] = harness.NewHost(t, bin, fmt.Sprintf("web-%d", i))
		tokens[i] = cp1.Token(hosts[i].Name)
	}
	replicated()
	// All enrol before any agent starts: an enrolling host's connection takes a
	// place on cp-1 too, and an agent refused for it stays on cp-2 until it looks
	// for its first broker again (--return-home, minutes), so agents started between
	// enrolments could all miss cp-1's one place.
	for i, h := range hosts {
		if r := h.Enrol(tokens[i]); r.Code != 0 {
			t.Fatalf("enrol %s: exit %d:\n%s", h.Name, r.Code, r.Combined())
		}
	}
	for _, h := range hosts {
		h.Run()
	}
	hostsOn := func(cp *harness.ControlPlane) int { return int(cp.Counter("mesh_broker_host_connections")) }
	// Each agent tries the brokers in an order of its own (a hash of its id), so some
	// of these six try cp-1 first. Hosts logging in at the same moment can each
	// take its last place: one host there, or two.
	harness.Eventually(t, 30*time.Second, "every host alive, one of them on cp-1 (or two)", func() bool {
		alive := 0
		for _, v := range cp2.Nodes().Nodes {
			if v.State == api.StateAlive && v.Role == "worker" {
				alive++
			}
		}
		on1 := hostsOn(cp1)
		return alive == len(hosts) && on1 >= 1 && on1 <= 2 && on1+hostsOn(cp2) == len(hosts)
	})
	if n := cp1.Counter("mesh_broker_max_host_connections"); n != 1 {
		t.Errorf("cp-1 reports a capacity of %v hosts, want 1", n)
	}
	// meshctl nodes shows each control node's hosts, as each says in its heartbeat.
	harness.Eventually(t, 10*time.Second, "meshctl nodes shows both control nodes' hosts", func() bool {
		v := controlView(t, cp2)
		h1, h2 := v["cp-1"].Hosts, v["cp-2"].Hosts
		return h1 != nil && h2 != nil && h1.Max == 1 && h1.Connected == hostsOn(cp1) &&
			h2.Max > len(hosts) && h2.Connected == hostsOn(cp2)
	})
	if r := cp1.Ctl("nodes"); r.Code != 0 || !strings.Contains(r.Stdout, "HOSTS") || !strings.Contains(r.Stdout, fmt.Sprintf("%d/1 ", hostsOn(cp1))) {
		t.Errorf("meshctl nodes does not show cp-1's hosts:\n%s", r.Combined())
	}

	late := harness.NewHost(t, bin, "late")
	tok, err := tokenfmt.Parse(cp1.Token(late.Name), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tok.Brokers = mustAddrs(t, cp1.Listen, cp2.Listen)
	replicated()
	before := cp1.Counter("mesh_broker_connections_refused_total", "reason="+broker.RefusalCode(broker.ErrFull))
	r := late.Enrol(tok.Encode())
	// Refused by cp-1, the enrolment goes on to cp-2: the next address in the token
	// or, first, the one cp-1 names to its clients (nats.go follows it).
	if refused := cp1.Counter("mesh_broker_connections_refused_total", "reason="+broker.RefusalCode(broker.ErrFull)); r.Code != 0 ||
		!strings.Contains(r.Combined(), cp2.Listen+": TLS handshake checked") || refused == before {
		t.Fatalf("enrol with cp-1 full and named first: exit %d, cp-1 refused %v hosts for room (%v before):\n%s", r.Code, refused, before, r.Combined())
	}
	late.Run()
	hosts = append(hosts, late)
	body := t.TempDir() + "/b.json"
	writeFile(t, body, `{"files":[{"path":"f","content":"spilled\n"}]}`)
	if r := cp1.Ctl("declare", "--all", "--file", body); r.Code != 0 {
		t.Fatalf("declare: exit %d:\n%s", r.Code, r.Combined())
	}
	for _, h := range hosts {
		cp1.WaitConverged(h.Name, 1, 30*time.Second)
	}
}
