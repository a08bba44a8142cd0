package main

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/api"
)

// TestControlTableShowsHosts: each control node's hosts, held and the most it holds,
// with "-" for a node that did not say and the count alone when not capped.
func TestControlTableShowsHosts(t *testing.T) {
	now := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	res := api.NodesResult{Control: []api.ControlView{
		{ID: "cp-1", Raft: api.RaftLeader, State: api.StateAlive, LastSeen: now, Broker: "10.0.0.1:7300", Hosts: &api.HostCapacity{Connected: 16, Max: 16}},
		{ID: "cp-2", Raft: api.RaftVoter, State: api.StateAlive, LastSeen: now, Broker: "10.0.0.2:7300", Hosts: &api.HostCapacity{Connected: 3}},
		{ID: "cp-3", Raft: api.RaftVoter, State: api.StateOffline, Broker: "10.0.0.3:7300"},
	}}
	var b strings.Builder
	printNodes(&b, res, now)
	lines := strings.Split(b.String(), "\n")
	if !strings.Contains(lines[0], "HOSTS") {
		t.Fatalf("no HOSTS column:\n%s", b.String())
	}
	col := strings.Index(lines[0], "HOSTS")
	for i, want := range []string{"16/16", "3", "-"} {
		if got := strings.Fields(lines[i+1][col:])[0]; got != want {
			t.Errorf("%s: HOSTS %q, want %q:\n%s", res.Control[i].ID, got, want, b.String())
		}
	}
}

// TestNodesTableShowsAgents: each node's agent, as the version of meshhost it last
// reported, "-" for a node that reported none kept (or a control plane older than
// the column), and what an older control plane may hold shown as one line; status
// counts the nodes not revoked by agent, the most run first.
func TestNodesTableShowsAgents(t *testing.T) {
	now := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	const upgraded = "meshhost/0.1.0+git20261203145709.7132ef2931ef"
	res := api.NodesResult{Nodes: []api.NodeView{
		{ID: "web-1", Role: "worker", State: api.StateAlive, Agent: upgraded},
		{ID: "web-2", Role: "worker", State: api.StateAlive, Agent: "meshhost/0.1.0"},
		{ID: "web-3", Role: "worker", State: api.StateOffline},
		{ID: "web-4", Role: "worker", State: api.StateAlive, Agent: "meshhost/0.1.0\x1b[2J"},
		{ID: "web-5", Role: "worker", State: api.StateRevoked, Agent: upgraded},
		{ID: "web-6", Role: "worker", State: api.StateAlive, Agent: upgraded},
	}}
	var b strings.Builder
	printNodes(&b, res, now)
	lines := strings.Split(b.String(), "\n")
	col := strings.Index(lines[0], "AGENT")
	if col < 0 {
		t.Fatalf("no AGENT column:\n%s", b.String())
	}
	for i, want := range []string{"0.1.0+git20261203145709.7132ef2931ef", "0.1.0", "-", `0.1.0\x1b[2J`} {
		if got := strings.Fields(lines[i+1][col:])[0]; got != want {
			t.Errorf("%s: AGENT %q, want %q:\n%s", res.Nodes[i].ID, got, want, b.String())
		}
	}
	sum := summarise(res)
	want := map[string]int{upgraded: 2, "meshhost/0.1.0": 1, "meshhost/0.1.0\x1b[2J": 1, agentNone: 1}
	if !maps.Equal(sum.Agents, want) {
		t.Errorf("status counts the agents %v, want %v", sum.Agents, want)
	}
	line := agentsLine(sum.Agents)
	if want := `agents: 2 ` + upgraded + `, 1 meshhost/0.1.0, 1 meshhost/0.1.0\x1b[2J, 1 none`; line != want {
		t.Errorf("status says\n%s\nwant\n%s", line, want)
	}
	many := map[string]int{}
	for i := range maxAgentsShown + 3 {
		many[fmt.Sprintf("meshhost/0.%d", i)] = 1
	}
	if line := agentsLine(many); !strings.HasSuffix(line, ", 3 of 3 other agents") || strings.Count(line, "meshhost/") != maxAgentsShown {
		t.Errorf("with %d agents status says %s", len(many), line)
	}
}
