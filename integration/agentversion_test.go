package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/host/buildinfo"
	"mesh/integration/harness"
)

// agentOf is the agent the meshhost binary at path names itself to the mesh:
// "meshhost/" and what its `version --json` says.
func agentOf(t *testing.T, path string) string {
	t.Helper()
	r := harness.Run(t, "", nil, path, "version", "--json")
	var v buildinfo.Version
	if err := json.Unmarshal([]byte(r.Stdout), &v); r.Code != 0 || err != nil {
		t.Fatalf("%s version --json: exit %d, %v:\n%s", path, r.Code, err, r.Combined())
	}
	return "meshhost/" + v.Version
}

// buildOtherAgent builds meshhost from this tree again with another stamp than
// bin.Meshhost's: with the commit Go records from the checkout (Go's default, which
// this machine's GOFLAGS may turn off, as the package's build then carries none), or
// without it if the package's build carries one. That is what an upgrade changes
// for the control plane: the version the agent names.
func buildOtherAgent(t *testing.T) (path, agent string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not on the PATH: a build stamped with its commit cannot be made")
	}
	root := moduleDir(t)
	if _, err := os.Stat(filepath.Join(root, ".git")); err != nil {
		t.Skipf("%s is not a git checkout (%v): a build stamped with its commit cannot be made", root, err)
	}
	current := agentOf(t, bin.Meshhost)
	path = filepath.Join(t.TempDir(), "meshhost")
	for _, vcs := range []string{"-buildvcs=true", "-buildvcs=false"} {
		cmd := exec.Command("go", "build", vcs, "-o", path, "./host/cmd/meshhost")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GOFLAGS="+withoutBuildVCS(os.Getenv("GOFLAGS")))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s ./host/cmd/meshhost: %v\n%s", vcs, err, out)
		}
		if agent = agentOf(t, path); agent != current {
			return path, agent
		}
	}
	t.Fatalf("builds with and without the commit both name themselves %s", current)
	return "", ""
}

// TestNodesShowTheAgentOfEachHost: an agent names its build to the mesh, and when
// the host's meshhost is replaced by another build and started again on the same
// state directory, meshctl nodes (the AGENT column and agent in --json), meshctl
// status (its count per agent) and mesh_nodes_agents on the leader and on a
// follower (which hears no reports: the agent reaches it through the replicated
// state) all move to the new build within a heartbeat or two.
func TestNodesShowTheAgentOfEachHost(t *testing.T) {
	otherBin, newer := buildOtherAgent(t)
	older := agentOf(t, bin.Meshhost)
	t.Logf("the agent goes from %s to %s", older, newer)

	cp := harness.NewControlPlane(t, bin, "agents")
	cp.Serve()
	follower := joinControl(t, cp, "cp-2")
	third := joinControl(t, cp, "cp-3")

	h := harness.NewHost(t, bin, "web-1")
	if r := h.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	h.Run()
	shows := func(agent string) func() bool {
		return func() bool {
			n, ok := cp.Node("web-1")
			return ok && n.Agent == agent
		}
	}
	harness.Eventually(t, 20*time.Second, "meshctl nodes shows web-1 running "+older, shows(older))
	counted := func(c *harness.ControlPlane, agent string) func() bool {
		return func() bool {
			f := c.Scrape()
			return harness.Sum(f, "mesh_nodes_agents", "agent="+agent) == 1 && harness.Sum(f, "mesh_nodes_agents") == 1
		}
	}
	harness.Eventually(t, 10*time.Second, "the leader counts web-1 under "+older, counted(cp, older))
	harness.Eventually(t, 10*time.Second, "the follower counts web-1 under "+older, counted(follower, older))

	// The upgrade: the same state directory, another build.
	h.Process().Kill()
	h.Bin.Meshhost = otherBin
	h.Run()
	harness.Eventually(t, 20*time.Second, "meshctl nodes shows web-1 running "+newer, shows(newer))
	harness.Eventually(t, 10*time.Second, "the leader counts web-1 under "+newer, counted(cp, newer))
	harness.Eventually(t, 10*time.Second, "the follower counts web-1 under "+newer, counted(follower, newer))

	table := cp.Ctl("nodes", "web-1")
	lines := strings.Split(table.Stdout, "\n")
	var header, row string
	for i, l := range lines {
		if strings.HasPrefix(l, "NODE") && i+1 < len(lines) {
			header, row = l, lines[i+1]
		}
	}
	col := strings.Index(header, "AGENT")
	if table.Code != 0 || col < 0 || col >= len(row) || strings.Fields(row[col:])[0] != strings.TrimPrefix(newer, "meshhost/") {
		t.Errorf("meshctl nodes web-1 (exit %d) does not show %s under AGENT:\n%s", table.Code, newer, table.Combined())
	}
	status := cp.Ctl("status")
	if !strings.Contains(status.Stdout, "agents: 1 "+newer+"\n") {
		t.Errorf("meshctl status (exit %d) does not count web-1 under %s:\n%s", status.Code, newer, status.Combined())
	}
	var js struct {
		Summary struct {
			Agents map[string]int `json:"agents"`
		} `json:"summary"`
	}
	r := cp.Ctl("status", "--json")
	if err := json.Unmarshal([]byte(r.Stdout), &js); err != nil || len(js.Summary.Agents) != 1 || js.Summary.Agents[newer] != 1 {
		t.Errorf("meshctl status --json counts the agents %v (%v), want %s: 1", js.Summary.Agents, err, newer)
	}

	// And each control node says which meshctl serves it.
	r = harness.Run(t, "", nil, bin.Meshctl, "version", "--json")
	var ctl buildinfo.Version
	if err := json.Unmarshal([]byte(r.Stdout), &ctl); err != nil || ctl.Version == "" {
		t.Fatalf("meshctl version --json: %v:\n%s", err, r.Combined())
	}
	r = cp.Ctl("control", "status", "--json")
	var cs struct {
		Answered []struct {
			Node    string `json:"node"`
			Version string `json:"version"`
		} `json:"answered"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &cs); err != nil || len(cs.Answered) != 3 {
		t.Fatalf("meshctl control status --json (exit %d, %v): want three answers:\n%s", r.Code, err, r.Combined())
	}
	for _, a := range cs.Answered {
		if a.Version != ctl.Version {
			t.Errorf("control status: %s says it runs meshctl %q, want %q", a.Node, a.Version, ctl.Version)
		}
	}

	// The host stopped, then the leader: the next leader has heard no report from
	// web-1, and shows its agent all the same (it is in the replicated state, not
	// in the memory of the leader that heard it).
	h.Process().Kill()
	byBroker := map[string]*harness.ControlPlane{cp.Listen: cp, follower.Listen: follower, third.Listen: third}
	var leader *harness.ControlPlane
	for _, c := range cp.Nodes().Control {
		if c.Raft == api.RaftLeader {
			leader = byBroker[c.Broker]
		}
	}
	if leader == nil {
		t.Fatalf("no leader among the test's control nodes: %+v", cp.Nodes().Control)
	}
	after := follower
	if leader == follower {
		after = third
	}
	leader.Process().Kill()
	harness.Eventually(t, 30*time.Second, "another leader shows web-1 offline, running "+newer, func() bool {
		res := after.Ctl("nodes", "--json", "web-1")
		var v struct {
			AnsweredBy string `json:"answered_by"`
			Nodes      []struct {
				State string `json:"state"`
				Agent string `json:"agent"`
			} `json:"nodes"`
		}
		if res.Code != 0 || json.Unmarshal([]byte(res.Stdout), &v) != nil || len(v.Nodes) != 1 || v.AnsweredBy == "" {
			return false
		}
		if v.Nodes[0].State != api.StateOffline {
			return false
		}
		if v.Nodes[0].Agent != newer {
			t.Fatalf("after the leader's loss, %s shows web-1 running %q, want %q", v.AnsweredBy, v.Nodes[0].Agent, newer)
		}
		return true
	})
}
