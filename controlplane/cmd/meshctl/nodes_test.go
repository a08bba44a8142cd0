package main

import (
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
