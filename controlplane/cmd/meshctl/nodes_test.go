package main

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
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
	printNodes(&b, res, now, false)
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
	printNodes(&b, res, now, false)
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

// TestStatusNamesNodesWhoseFilesWerePutBack: status's summary counts the nodes whose
// agent put back files changed on the host, revoked ones aside, and its line names
// them the most recent first, the count of files and how long ago by the answering
// control node's clock, with the rest counted past maxPutBackShown.
func TestStatusNamesNodesWhoseFilesWerePutBack(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	res := api.NodesResult{Nodes: []api.NodeView{
		{ID: "web-1", State: api.StateAlive},
		{ID: "web-2", State: api.StateAlive, PutBack: 3, LastPutBackAt: now.Add(-2 * time.Hour)},
		{ID: "web-3", State: api.StateOffline, PutBack: 1, LastPutBackAt: now.Add(-90 * time.Second)},
		{ID: "web-4", State: api.StateRevoked, PutBack: 7, LastPutBackAt: now},
	}}
	if got := summarise(res).PutBack; got != 2 {
		t.Errorf("summary counts %d nodes with files put back, want 2", got)
	}
	want := "files changed on the host and put back as declared, on 2 node(s): web-3 (1 file(s), last 1m30s ago), web-2 (3 file(s), last 2h0m0s ago)"
	if got := putBackLine(res.Nodes, now); got != want {
		t.Errorf("status says\n%s\nwant\n%s", got, want)
	}
	if got := putBackLine(res.Nodes[:1], now); got != "" {
		t.Errorf("no node put files back, and status says %q", got)
	}
	var many []api.NodeView
	for i := range maxPutBackShown + 2 {
		many = append(many, api.NodeView{ID: fmt.Sprintf("db-%d", i), State: api.StateAlive, PutBack: 1, LastPutBackAt: now.Add(-time.Duration(i) * time.Minute)})
	}
	if got := putBackLine(many, now); !strings.HasPrefix(got, "files changed on the host and put back as declared, on 7 node(s): db-0 (1 file(s), last just now), db-1") ||
		!strings.HasSuffix(got, "and 2 more (`--json`: put_back)") || strings.Contains(got, "db-5") {
		t.Errorf("with %d nodes status says %s", len(many), got)
	}
}

// TestRosterSelection: --role, --label and --state each narrow the roster, all given
// must match, a label matches as declare's does, and status's summary and verdict are
// about the nodes selected.
func TestRosterSelection(t *testing.T) {
	v := func(n uint64) *uint64 { return &n }
	roster := api.NodesResult{Nodes: []api.NodeView{
		{ID: "web-1", Role: "worker", Labels: map[string]string{"tier": "web", "rack": "a"}, State: api.StateAlive, Declared: 2, Applied: v(2), Converged: true, DeclaredBody: "3fa2c1d09e8b" + strings.Repeat("0", 52)},
		{ID: "web-2", Role: "worker", Labels: map[string]string{"tier": "web", "rack": "b"}, State: api.StateAlive, Declared: 2, Applied: v(1), DeclaredBody: "3fa2c1d09e8b" + strings.Repeat("0", 52)},
		{ID: "db-1", Role: "worker", Labels: map[string]string{"tier": "db", "rack": "a"}, State: api.StateOffline, Declared: 2, Applied: v(1)},
		{ID: "db-2", Role: "worker", State: api.StateRevoked, Declared: 1},
		{ID: "gw-1", Role: "gateway", Labels: map[string]string{"rack": "b"}, State: api.StateAlive, Declared: 1, Applied: v(1), Converged: true},
	}}
	sel := func(args ...string) *rosterSelection {
		t.Helper()
		var s rosterSelection
		s.labels = labelFlag{}
		for i := 0; i < len(args); i += 2 {
			var err error
			switch args[i] {
			case "--role":
				s.role = args[i+1]
			case "--label":
				err = s.labels.Set(args[i+1])
			case "--state":
				err = s.states.Set(args[i+1])
			case "--body":
				err = (*bodyFlag)(&s.body).Set(args[i+1])
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		return &s
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "web-1 web-2 db-1 db-2 gw-1"},
		{[]string{"--role", "worker"}, "web-1 web-2 db-1 db-2"},
		{[]string{"--role", "gateway"}, "gw-1"},
		{[]string{"--label", "rack=a"}, "web-1 db-1"},
		{[]string{"--label", "rack=b", "--label", "tier=web"}, "web-2"},
		{[]string{"--label", "tier="}, ""}, // the flag refuses it (TestAnEmptyLabelValueIsAUsageError); it matches nothing
		{[]string{"--state", "offline"}, "db-1"},
		{[]string{"--state", "offline,revoked"}, "db-1 db-2"},
		{[]string{"--state", "offline", "--state", "revoked", "--state", "offline"}, "db-1 db-2"},
		{[]string{"--role", "worker", "--label", "rack=b", "--state", "alive"}, "web-2"},
		{[]string{"--role", "gateway", "--label", "tier=web"}, ""},
		{[]string{"--label", "rack=c"}, ""},
		// The nodes a declaration reached, by its body's digest or a prefix of it.
		{[]string{"--body", "3fa2c1d09e8b"}, "web-1 web-2"},
		{[]string{"--body", "3fa2c1d09e8b" + strings.Repeat("0", 52), "--state", "alive"}, "web-1 web-2"},
		{[]string{"--body", "3fa2c1d0aaaa"}, ""},
	} {
		res := roster
		res.Nodes = slices.Clone(roster.Nodes)
		s := sel(c.args...)
		s.apply(&res)
		var got []string
		for _, n := range res.Nodes {
			got = append(got, n.ID)
		}
		if strings.Join(got, " ") != c.want {
			t.Errorf("%v selects %q, want %q", c.args, strings.Join(got, " "), c.want)
		}
		if s.active() != (len(c.args) > 0) {
			t.Errorf("%v: active %v", c.args, s.active())
		}
	}
	for _, bad := range []string{"3fa2c1d", "3FA2C1D09E8B", "3fa2c1d09e8g", strings.Repeat("0", 65)} {
		var b bodyFlag
		if err := b.Set(bad); err == nil {
			t.Errorf("--body %q taken", bad)
		}
	}
	if got := sel("--state", "offline", "--label", "tier=db", "--role", "worker", "--label", "rack=a").String(); got != "--role worker --label rack=a --label tier=db --state offline" {
		t.Errorf("the selection reads %q", got)
	}

	// status about rack b: web-2 behind, gw-1 converged; rack a's offline db-1 is
	// not counted, nor web-1.
	res := roster
	res.Nodes = slices.Clone(roster.Nodes)
	sel("--label", "rack=b").apply(&res)
	if sum := summarise(res); sum.Nodes != 2 || sum.Converged != 1 || sum.Behind != 1 || sum.Offline != 0 {
		t.Errorf("summary of rack b: %+v", sum)
	}
	if err := notConverged(res.Nodes, false); err == nil || !strings.Contains(err.Error(), "1 live node(s): 1 behind: web-2 (declared v") {
		t.Errorf("verdict on rack b: %v", err)
	}
	res.Nodes = slices.Clone(roster.Nodes)
	sel("--label", "rack=a", "--state", "alive").apply(&res)
	if err := notConverged(res.Nodes, false); err != nil {
		t.Errorf("rack a's live nodes converged: %v", err)
	}
}

// TestKeyringStatusNamesNodesThatNeverReported: epochs start at 1, so a node that
// reported none (enrolled, its agent never run) is shown as such, not as "epoch 0",
// and only live nodes behind hold retire back; a node on a keyring newer than the
// control plane's (restored from a copy older than a rotation) is not "yes".
func TestKeyringStatusNamesNodesThatNeverReported(t *testing.T) {
	var out bytes.Buffer
	printKeyringStatus(&out, api.KeyringStatus{Epoch: 2, Keys: []string{"a", "b"}, Nodes: []api.KeyringAck{
		{Node: "new-1", State: api.StateOffline},
		{Node: "web-1", State: api.StateAlive, Epoch: 2},
		{Node: "web-2", State: api.StateAlive, Epoch: 1},
		{Node: "web-3", State: api.StateAlive, Epoch: 4},
	}})
	got := out.String()
	var rows []string
	for line := range strings.Lines(got) {
		rows = append(rows, strings.Join(strings.Fields(line), " "))
	}
	for _, want := range []string{"new-1 offline - no (never reported)", "web-1 alive epoch 2 yes", "web-2 alive epoch 1 no (behind)", "web-3 alive epoch 4 no (ahead of the control plane)",
		"1 live node(s) behind; retire is refused until they acknowledge (or --force)"} {
		if !slices.Contains(rows, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	if strings.Contains(got, "epoch 0") {
		t.Errorf("a node that never reported shown as epoch 0:\n%s", got)
	}
}

// TestSharedKeyLine: status names the nodes whose key holds more than one
// connection at once (a machine cloned after its enrolment shows so for good), for
// how long when the control plane says; revoked nodes and nodes with one
// connection are left out.
func TestSharedKeyLine(t *testing.T) {
	now := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	nodes := []api.NodeView{
		{ID: "web-1", State: api.StateAlive, Connections: 2, SharedSince: now.Add(-3 * time.Minute)},
		{ID: "web-2", State: api.StateAlive},
		{ID: "web-3", State: api.StateRevoked, Connections: 3},
		{ID: "web-4", State: api.StateAlive, Connections: 2}, // a control plane that does not say since when
	}
	got := sharedKeyLine(nodes, now, 0)
	if !strings.HasPrefix(got, "more than one connection with one node's key, on 2 node(s): web-1 (2, for 3m0s), web-4 (2);") ||
		!strings.Contains(got, "failing key_shared") || !strings.Contains(got, "Cloned machines") ||
		!strings.Contains(got, "(2 minutes unless serve was given another), a second machine") {
		t.Fatalf("sharedKeyLine = %q", got)
	}
	// The grace the control plane says it runs, where it said the default's
	// whatever serve was given (a docs walkthrough).
	if got := sharedKeyLine(nodes, now, 20*time.Second); !strings.Contains(got, "--shared-key-grace, 20s, a second machine") || strings.Contains(got, "2 minutes") {
		t.Fatalf("sharedKeyLine with a grace of 20s = %q", got)
	}
	if got := sharedKeyLine(nodes[1:3], now, 0); got != "" {
		t.Fatalf("no shared key: %q", got)
	}
	// The table says it of the node too (audit of the host's weeks, finding 7: only
	// status's summary did), not of a revoked one.
	var b strings.Builder
	printNodes(&b, api.NodesResult{Nodes: nodes[:3]}, time.Now(), false)
	if !strings.Contains(b.String(), "alive (2 connections)") || strings.Contains(b.String(), "(3 connections)") {
		t.Fatalf("the table:\n%s", b.String())
	}
}

// TestControlTableSaysNotFollowing: a control node alive by its heartbeats whose Raft
// does not follow the leader (api.ControlView's NotFollowing) shows "alive, not
// following" under STATE; it showed "alive", and the rolling-restart gate ("three
// voters alive") passed.
func TestControlTableSaysNotFollowing(t *testing.T) {
	now := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	res := api.NodesResult{Control: []api.ControlView{
		{ID: "cp-10", Raft: api.RaftLeader, State: api.StateAlive, LastSeen: now, AppliedIndex: 19840},
		{ID: "cp-11", Raft: api.RaftVoter, State: api.StateAlive, LastSeen: now, AppliedIndex: 889,
			NotFollowing: "a candidate at term 57: it hears no leader", NotFollowingSince: now.Add(-40 * time.Second)},
		{ID: "cp-6", Raft: api.RaftVoter, State: api.StateAlive, LastSeen: now, AppliedIndex: 19840},
	}}
	var b strings.Builder
	printNodes(&b, res, now, false)
	lines := strings.Split(b.String(), "\n")
	col := strings.Index(lines[0], "STATE")
	end := strings.Index(lines[0], "LAST SEEN")
	for i, want := range []string{"alive", "alive, not following", "alive"} {
		if got := strings.TrimSpace(lines[i+1][col:end]); got != want {
			t.Errorf("%s: STATE %q, want %q:\n%s", res.Control[i].ID, got, want, b.String())
		}
	}
}

// TestNodesTableShowsLabels (a newcomer's audit): the labels a declaration selects
// by were shown only with --json, and a `declare --label` matching no node said
// only "matches no node". The table shows them, sorted, "-" for none.
func TestNodesTableShowsLabels(t *testing.T) {
	now := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	res := api.NodesResult{Nodes: []api.NodeView{
		{ID: "web-1", Role: "worker", State: api.StateAlive, Labels: map[string]string{"tier": "web", "dc": "fra"}},
		{ID: "web-2", Role: "worker", State: api.StateAlive},
	}}
	var b strings.Builder
	printNodes(&b, res, now, false)
	lines := strings.Split(b.String(), "\n")
	col := strings.Index(lines[0], "LABELS")
	if col < 0 {
		t.Fatalf("no LABELS column:\n%s", b.String())
	}
	if got := lines[1][col:]; !strings.HasPrefix(got, "dc=fra tier=web ") {
		t.Errorf("web-1's labels: %q:\n%s", got, b.String())
	}
	if got := strings.Fields(lines[2][col:])[0]; got != "-" {
		t.Errorf("web-2, no labels: %q:\n%s", got, b.String())
	}
}

// TestSigningKeyStatusExitsFiveWhileNodesLag (a newcomer's audit): the rotation's
// "wait until every live node shows the new epoch" could not be scripted: status
// exited 0 either way. It exits 5 while a live node is behind, or a node holds a
// keyring newer than the control plane's; an offline node behind does not count.
func TestSigningKeyStatusExitsFiveWhileNodesLag(t *testing.T) {
	for _, c := range []struct {
		name  string
		nodes []api.KeyringAck
		want  int
	}{
		{"all acknowledged", []api.KeyringAck{{Node: "a", State: api.StateAlive, Epoch: 2}}, 0},
		{"an offline node behind", []api.KeyringAck{{Node: "a", State: api.StateAlive, Epoch: 2}, {Node: "b", State: api.StateOffline, Epoch: 1}}, 0},
		{"a live node behind", []api.KeyringAck{{Node: "a", State: api.StateAlive, Epoch: 1}}, exitNotConverged},
		{"a live node never reported", []api.KeyringAck{{Node: "a", State: api.StateAlive}}, exitNotConverged},
		{"a node ahead", []api.KeyringAck{{Node: "a", State: api.StateOffline, Epoch: 3}}, exitNotConverged},
	} {
		err := keyringNotAcknowledged(api.KeyringStatus{Epoch: 2, Keys: []string{"a", "b"}, Nodes: c.nodes})
		got := 0
		var ee exitError
		if errors.As(err, &ee) {
			got = ee.code
		} else if err != nil {
			got = -1
		}
		if got != c.want {
			t.Errorf("%s: exit %d (%v), want %d", c.name, got, err, c.want)
		}
	}
}

// TestRemovedControlNodesAreCounted (a newcomer's walkthrough): control nodes
// removed stay in the roster for good, and were a row each, "removed removed",
// as long as the mesh lived. They are counted under the table; named, shown.
func TestRemovedControlNodesAreCounted(t *testing.T) {
	now := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	res := api.NodesResult{Control: []api.ControlView{
		{ID: "cp-1", Raft: api.RaftLeader, State: api.StateAlive, LastSeen: now},
		{ID: "cp-2", Raft: api.RaftVoter, State: api.StateAlive, LastSeen: now},
		{ID: "cp-3", Raft: api.RaftRemoved, State: api.StateRemoved},
	}}
	var b strings.Builder
	printNodes(&b, res, now, false)
	if strings.Contains(b.String(), "cp-3") || !strings.Contains(b.String(), "(1 control node(s) removed: meshctl nodes --json lists them, or name one)") {
		t.Errorf("a removed control node in the table:\n%s", b.String())
	}
	b.Reset()
	printNodes(&b, api.NodesResult{Control: res.Control[2:]}, now, true)
	if !strings.Contains(b.String(), "cp-3") || strings.Contains(b.String(), "removed:") {
		t.Errorf("a removed control node named:\n%s", b.String())
	}
}
