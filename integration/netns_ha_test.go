package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/integration/harness"
)

// machine is a network namespace running one program of the mesh.
// TestControlPlaneMachines: three control nodes and a host, each its own network
// namespace, behind a router. The control nodes join over the network; the leader's
// machine is killed and a new leader takes over; a follower's machine is cut off by
// the router and comes back; the host keeps converging throughout.
func TestControlPlaneMachines(t *testing.T) {
	t.Parallel() // mostly waits (grace periods, timeouts): see TestMain
	n := newNetns(t, "mha", "TestHighAvailability")
	router := n.router("router")
	machines := map[string]*machine{}
	for i, name := range []string{"cp-1", "cp-2", "cp-3", "web-1"} {
		machines[name] = n.behind(router, name, fmt.Sprintf("10.73.%d", i+1))
	}
	run := func(m *machine, stdin string, args ...string) harness.Result { return m.run(t, stdin, args...) }
	ctl := func(m *machine, args ...string) harness.Result { return m.ctl(t, args...) }
	serve := func(m *machine) {
		m.serve(t, 60*time.Second, "--raft-heartbeat", "500ms", "--reconcile", "1s", "--offline-after", "3s")
	}
	cp1 := machines["cp-1"]
	if r := ctl(cp1, "bootstrap", "--mesh", "machines", "--listen", cp1.ip+":7300"); r.Code != 0 {
		t.Fatalf("bootstrap: %s", r.Combined())
	}
	serve(cp1)
	for _, id := range []string{"cp-2", "cp-3"} {
		m := machines[id]
		tok := ctl(cp1, "token", "--role", "control", "--node", id, "--addr", m.ip+":7300")
		if tok.Code != 0 {
			t.Fatalf("control token %s: %s", id, tok.Combined())
		}
		if r := run(m, tok.Stdout, bin.Meshctl, "join", "--data", m.dir, "--raft-heartbeat", "500ms"); r.Code != 0 {
			t.Fatalf("join %s over the router (exit %d):\n%s", id, r.Code, r.Combined())
		}
		serve(m)
	}
	view := func(from *machine) api.NodesResult {
		r := ctl(from, "nodes", "--json")
		var res api.NodesResult
		if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &res) != nil {
			return api.NodesResult{}
		}
		return res
	}
	harness.Eventually(t, 30*time.Second, "three voters across the router", func() bool {
		voters := 0
		for _, c := range view(cp1).Control {
			if c.Raft == api.RaftVoter || c.Raft == api.RaftLeader {
				voters++
			}
		}
		return voters == 3
	})

	web := machines["web-1"]
	tok := ctl(machines["cp-2"], "token", "--node", "web-1")
	if r := run(web, tok.Stdout, bin.Meshhost, "enrol", "--state", web.dir); r.Code != 0 {
		t.Fatalf("enrol across the router: %s", r.Combined())
	}
	web.proc = harness.Start(t, nil, "ip", in(web.ns, bin.Meshhost, "run", "--state", web.dir, "--root", filepath.Join(web.dir, "managed"), "--heartbeat", "1s")...)
	body := filepath.Join(t.TempDir(), "b.json")
	version := 0
	declareVia := func(m *machine, content string) {
		t.Helper()
		writeFile(t, body, `{"files":[{"path":"state","content":"`+content+`"}]}`)
		version++
		var last harness.Result
		deadline := time.Now().Add(30 * time.Second)
		for last = ctl(m, "declare", "--node", "web-1", "--file", body); last.Code != 0; last = ctl(m, "declare", "--node", "web-1", "--file", body) {
			if time.Now().After(deadline) {
				for id, mm := range machines {
					if mm.proc != nil {
						out := mm.proc.Output()
						if len(out) > 3000 {
							out = out[len(out)-3000:]
						}
						t.Logf("=== %s\n%s", id, out)
					}
				}
				t.Fatalf("declare via %s: exit %d:\n%s", m.ns, last.Code, last.Combined())
			}
			time.Sleep(200 * time.Millisecond)
		}
		harness.Eventually(t, 60*time.Second, fmt.Sprintf("web-1 applies %q", content), func() bool {
			b, _ := os.ReadFile(filepath.Join(web.dir, "managed", "state"))
			return string(b) == content
		})
	}
	declareVia(cp1, "one")

	// The leader's machine dies.
	var leader string
	for _, c := range view(cp1).Control {
		if c.Raft == api.RaftLeader {
			leader = c.ID
		}
	}
	machines[leader].proc.Kill()
	var survivor *machine
	for _, id := range []string{"cp-1", "cp-2", "cp-3"} {
		if id != leader {
			survivor = machines[id]
		}
	}
	declareVia(survivor, "after the leader died")
	serve(machines[leader])

	// A follower's machine is cut off by the router, then comes back.
	var follower, current string
	harness.Eventually(t, 30*time.Second, "a leader and a follower", func() bool {
		follower, current = "", ""
		for _, c := range view(survivor).Control {
			switch c.Raft {
			case api.RaftLeader:
				current = c.ID
			case api.RaftVoter:
				follower = c.ID
			}
		}
		return current != "" && follower != ""
	})
	n.ip("-n", router, "link", "set", "r-"+follower, "down")
	declareVia(machines[current], "with a follower cut off")
	n.ip("-n", router, "link", "set", "r-"+follower, "up")
	harness.Eventually(t, 30*time.Second, follower+" catches up", func() bool {
		for _, c := range view(machines[follower]).Control {
			if c.ID == follower && c.State == api.StateAlive {
				return true
			}
		}
		return false
	})
	declareVia(machines[follower], "from the follower that came back")
}
