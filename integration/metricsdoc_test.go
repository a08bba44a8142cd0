package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
	dto "github.com/prometheus/client_model/go"

	"mesh/controlplane/api"
	"mesh/integration/harness"
)

var docMetricRE = regexp.MustCompile("`(mesh_[a-z_]+)(?:\\{([a-z_,]+)\\})?`")

// docMetric is a metric family the operations guide's tables name: its labels, and
// the text of its row.
type docMetric struct {
	labels []string // sorted
	row    string
}

// documentedMetrics reads the metric tables of docs/operations.md's "Metrics and
// health": the control plane's and the agent's, by family name.
func documentedMetrics(t *testing.T) (control, agent map[string]docMetric) {
	t.Helper()
	raw, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	start := strings.Index(doc, "\n## Metrics and health\n")
	if start < 0 {
		t.Fatal("docs/operations.md has no section \"Metrics and health\"")
	}
	sec := doc[start+1:]
	if end := strings.Index(sec[3:], "\n## "); end >= 0 {
		sec = sec[:end+3]
	}
	split := strings.Index(sec, "The agent (`meshhost run`):")
	if split < 0 {
		t.Fatal("the metrics section has no table of the agent's metrics")
	}
	read := func(part string) map[string]docMetric {
		out := map[string]docMetric{}
		for _, line := range strings.Split(part, "\n") {
			if !strings.HasPrefix(line, "| `mesh_") {
				continue
			}
			cell, _, _ := strings.Cut(line[1:], " | ")
			for _, m := range docMetricRE.FindAllStringSubmatch(cell, -1) {
				var labels []string
				if m[2] != "" {
					labels = strings.Split(m[2], ",")
				}
				slices.Sort(labels)
				if _, dup := out[m[1]]; dup {
					t.Errorf("docs/operations.md lists %s twice", m[1])
				}
				out[m[1]] = docMetric{labels: labels, row: line}
			}
		}
		return out
	}
	return read(sec[:split]), read(sec[split:])
}

// exposedMetric is a family of a scrape: its label names (a histogram's le aside),
// and the values each label takes.
type exposedMetric struct {
	labels []string // sorted
	values map[string]map[string]bool
}

// exposedMetrics is every mesh_* family of a scrape.
func exposedMetrics(fams map[string]*dto.MetricFamily) map[string]exposedMetric {
	out := map[string]exposedMetric{}
	for name, f := range fams {
		if !strings.HasPrefix(name, "mesh_") {
			continue
		}
		e := exposedMetric{labels: []string{}, values: map[string]map[string]bool{}}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if e.values[l.GetName()] == nil {
					e.values[l.GetName()] = map[string]bool{}
					e.labels = append(e.labels, l.GetName())
				}
				e.values[l.GetName()][l.GetValue()] = true
			}
		}
		slices.Sort(e.labels)
		out[name] = e
	}
	return out
}

// openLabels are the labels whose values the tables do not list one by one: they
// name where the values come from (the protocol's codes, nats-server's events, the
// subjects of the protocol).
var openLabels = map[string]bool{
	"mesh_control_requests_refused_total/subject": true,
	"mesh_control_requests_refused_total/reason":  true,
	"mesh_control_messages_dropped_total/subject": true,
	"mesh_broker_client_violations_total/kind":    true,
	"mesh_broker_client_violations_total/account": true,
	"mesh_agent_envelopes_refused_total/code":     true,
	// The build: its version and commit; and whose it is, the mesh and the node.
	"mesh_build_info/version":        true,
	"mesh_build_info/revision":       true,
	"mesh_build_info/mesh":           true,
	"mesh_build_info/node":           true,
	"mesh_agent_build_info/version":  true,
	"mesh_agent_build_info/revision": true,
	"mesh_agent_build_info/mesh":     true,
	"mesh_agent_build_info/node":     true,
	// The agents the hosts report (none and other aside, which the row names).
	"mesh_nodes_agents/agent": true,
}

// compareMetrics reports, both ways, what the doc and a scrape disagree on: the
// families, their labels, and the values of the labels the tables list.
func compareMetrics(t *testing.T, side string, doc map[string]docMetric, exposed map[string]exposedMetric) {
	t.Helper()
	for name, e := range exposed {
		d, ok := doc[name]
		switch {
		case !ok:
			t.Errorf("%s exposes %s%v, which the metrics table of docs/operations.md does not list", side, name, e.labels)
			continue
		case !slices.Equal(d.labels, e.labels) && !(len(d.labels) == 0 && len(e.labels) == 0):
			t.Errorf("%s exposes %s with labels %v; docs/operations.md documents %v", side, name, e.labels, d.labels)
		}
		for label, values := range e.values {
			if openLabels[name+"/"+label] {
				continue
			}
			for v := range values {
				if !strings.Contains(d.row, "`"+v+"`") {
					t.Errorf("%s exposes %s{%s=%q}; its row in docs/operations.md does not name `%s`", side, name, label, v, v)
				}
			}
		}
	}
	for name := range doc {
		if _, ok := exposed[name]; !ok {
			t.Errorf("docs/operations.md documents %s for the %s, which it does not expose", name, side)
		}
	}
}

// statusSummary is what `meshctl status --json` counts.
type statusSummary struct {
	Nodes, Converged, Behind, Failing, Stale, Offline, Revoked int
}

// nodeStatesAgree checks mesh_nodes{state} against the summary of meshctl status:
// the same nodes converged, failing, stale, offline and revoked; behind counts the
// not converged, which status splits into behind and failing; alive_not_converged
// the nodes status names as not converged (alive, and not converged or stale).
func nodeStatesAgree(cp *harness.ControlPlane) error {
	r := cp.Ctl("status", "--json")
	var out struct {
		Summary statusSummary  `json:"summary"`
		Nodes   []api.NodeView `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil {
		return fmt.Errorf("meshctl status --json: %v:\n%s", err, r.Combined())
	}
	named := 0
	for _, n := range out.Nodes {
		if n.State == api.StateAlive && (!n.Converged || n.Stale) {
			named++
		}
	}
	s := out.Summary
	fams := cp.Scrape()
	got := func(st string) int { return int(harness.Sum(fams, "mesh_nodes", "state="+st)) }
	var diffs []string
	for _, c := range []struct {
		state      string
		metric, ok int
	}{
		{"converged", got("converged"), s.Converged},
		{"failing", got("failing"), s.Failing},
		{"behind", got("behind"), s.Behind + s.Failing},
		{"stale", got("stale"), s.Stale},
		{"offline", got("offline"), s.Offline},
		{"revoked", got("revoked"), s.Revoked},
		{"alive", got("alive"), s.Nodes - s.Offline - s.Revoked},
		{"alive_not_converged", got("alive_not_converged"), named},
	} {
		if c.metric != c.ok {
			diffs = append(diffs, fmt.Sprintf("mesh_nodes{state=%q} = %d, meshctl status says %d", c.state, c.metric, c.ok))
		}
	}
	if len(diffs) > 0 {
		return fmt.Errorf("%s (status: %+v)", strings.Join(diffs, "; "), s)
	}
	return nil
}

// TestMetricsMatchTheOperationsGuide: a control node and an agent, driven through
// what makes each of their mesh_* families appear (backups taken, an enrolment, a
// failed hook, a spent token, a compromised host over its budgets and grants, a
// bare login, an unknown key), expose exactly the families docs/operations.md's tables list, with
// the labels listed. Then the gauges go back down when their condition clears: the
// hook retried with success, the agent stopped and started again; and all along,
// mesh_nodes{state} counts what meshctl status counts.
func TestMetricsMatchTheOperationsGuide(t *testing.T) {
	docControl, docAgent := documentedMetrics(t)
	if len(docControl) < 20 || len(docAgent) < 8 {
		t.Fatalf("read %d control plane and %d agent metrics from docs/operations.md: the tables were not found whole", len(docControl), len(docAgent))
	}

	cp := harness.NewControlPlane(t, bin, "metricsdoc")
	// With backups: their figures are exported only by a node that takes them.
	cp.Serve("--backup-dir", filepath.Join(t.TempDir(), "backups"))
	dir := t.TempDir()
	fixed := filepath.Join(dir, "fixed")
	hooksFile := filepath.Join(dir, "hooks.json")
	writeFile(t, hooksFile, `{"hooks":[{"name":"restart-app","paths":["etc/*"],"run":["sh","-c","test -e `+fixed+`"]}]}`)
	h := harness.NewHost(t, bin, "web-1")
	if r := h.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	agentAddr := fmt.Sprintf("127.0.0.1:%d", harness.FreePorts(t, 1)[0])
	agentURL := "http://" + agentAddr + "/metrics"
	h.Run("--hooks", hooksFile, "--metrics-listen", agentAddr)
	cp.WaitConverged("web-1", 0, 20*time.Second)

	// The hook fails: failing, in the metrics as in status.
	body := filepath.Join(dir, "b.json")
	writeFile(t, body, `{"files":[{"path":"etc/app.conf","content":"one"}]}`)
	if r := cp.Ctl("declare", "--node", "web-1", "--file", body, "--wait", "30s"); r.Code != 5 {
		t.Fatalf("declare with the hook failing: exit %d, want 5:\n%s", r.Code, r.Combined())
	}
	harness.Eventually(t, 10*time.Second, "the failed hook counted as failing", func() bool {
		return harness.Sum(cp.Scrape(), "mesh_nodes", "state=failing") == 1
	})
	if err := nodeStatesAgree(cp); err != nil {
		t.Errorf("with a hook failed: %v", err)
	}
	if got := harness.Sum(cp.Scrape(), "mesh_nodes_errors", "code=hook_failed"); got != 1 {
		t.Errorf("mesh_nodes_errors{code=hook_failed} = %v with web-1's hook failed, want 1", got)
	}

	// A second host, compromised: its key is used by hand.
	rogue := harness.NewHost(t, bin, "rogue")
	token := cp.Token("rogue")
	if r := rogue.Enrol(token); r.Code != 0 {
		t.Fatalf("enrol rogue: %s", r.Combined())
	}
	if r := harness.NewHost(t, bin, "rogue-copy").Enrol(token); r.Code == 0 {
		t.Fatal("a spent token enrolled a second machine")
	}
	errs := make(chan error, 8)
	nc := nodeConn(t, cp.Dir, rogue.State, cp.Listen, errs)
	// Over its grant: another node's status subject.
	nc.Publish("mesh.node.web-1.status", []byte("{}"))
	nc.Flush()
	// A report whose error is a refusal of junk, its version applied: converged,
	// as a real agent reports after someone sent it junk.
	st, _ := json.Marshal(api.Status{V: api.ProtocolVersion, Node: "rogue", HaveApplied: true, AppliedVersion: 0, KeyringEpoch: 1,
		Error: &api.StatusError{Code: "malformed", Message: "declarations: malformed envelope: not JSON"}})
	nc.Publish("mesh.node.rogue.status", st)
	nc.Flush()
	harness.Eventually(t, 10*time.Second, "rogue's report recorded", func() bool {
		n, _ := cp.Node("rogue")
		return n.LastError != nil && n.LastError.Code == "malformed"
	})
	if err := nodeStatesAgree(cp); err != nil {
		t.Errorf("with a converged node that refused junk: %v", err)
	}
	// Converged, and counted by its code all the same; a code no protocol names
	// is counted as other, not as a series of its own.
	if got := harness.Sum(cp.Scrape(), "mesh_nodes_errors", "code=malformed"); got != 1 {
		t.Errorf("mesh_nodes_errors{code=malformed} = %v with rogue converged and reporting junk refused, want 1", got)
	}
	st, _ = json.Marshal(api.Status{V: api.ProtocolVersion, Node: "rogue", HaveApplied: true, AppliedVersion: 0, KeyringEpoch: 1,
		Error: &api.StatusError{Code: "zzz_custom", Message: "a code of the host's own"}})
	nc.Publish("mesh.node.rogue.status", st)
	nc.Flush()
	harness.Eventually(t, 10*time.Second, "rogue's custom code counted as other", func() bool {
		f := cp.Scrape()
		return harness.Sum(f, "mesh_nodes_errors", "code=other") == 1 && harness.Sum(f, "mesh_nodes_errors", "code=malformed") == 0
	})
	// Over its size budget: disconnected.
	big, _ := json.Marshal(api.Status{V: api.ProtocolVersion, Node: "rogue", Agent: strings.Repeat("x", 9<<10)})
	nc.Publish("mesh.node.rogue.status", big)
	nc.Flush()
	harness.Eventually(t, 10*time.Second, "the oversized report's sender disconnected", func() bool { return nc.IsClosed() || !nc.IsConnected() })
	// A login signing the bare nonce (an agent older than decision 0018), and a key
	// the mesh does not know.
	if c, err := dialNode(t, rogue.KeyPair(t), pinOf(t, cp), cp.Listen); err == nil {
		c.Close()
	}
	stranger, _ := nkeys.CreateUser()
	if c, err := dialNode(t, stranger, pinOf(t, cp), cp.Listen); err == nil {
		c.Close()
		t.Error("an unknown key logged in")
	}

	var control map[string]*dto.MetricFamily
	harness.Eventually(t, 10*time.Second, "every labelled family of the control plane counted once", func() bool {
		control = cp.Scrape()
		for _, name := range []string{"mesh_control_messages_dropped_total", "mesh_control_budget_disconnects_total",
			"mesh_broker_client_violations_total", "mesh_broker_unbound_logins_total", "mesh_broker_connections_refused_total",
			"mesh_control_requests_refused_total", "mesh_control_enrolments_total"} {
			if _, ok := control[name]; !ok {
				return false
			}
		}
		return true
	})
	// The unknown key is counted under its code, as the table names it.
	harness.Eventually(t, 10*time.Second, "the unknown key's refusal counted as unknown_key", func() bool {
		return harness.Sum(cp.Scrape(), "mesh_broker_connections_refused_total", "reason=unknown_key") >= 1
	})
	compareMetrics(t, "the control plane", docControl, exposedMetrics(control))
	compareMetrics(t, "the agent", docAgent, exposedMetrics(harness.Scrape(t, agentURL)))

	// The host fixed, the hook retried: failing goes back to 0 on both sides.
	if err := os.WriteFile(fixed, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := harness.Run(t, "", nil, bin.Meshhost, "hooks", "retry", "--state", h.State, "--timeout", "30s"); r.Code != 0 {
		t.Fatalf("hooks retry: exit %d:\n%s", r.Code, r.Combined())
	}
	harness.Eventually(t, 20*time.Second, "web-1 converged after the retry", func() bool {
		n, _ := cp.Node("web-1")
		return n.Converged
	})
	if got := harness.Sum(harness.Scrape(t, agentURL), "mesh_agent_hooks_failed"); got != 0 {
		t.Errorf("mesh_agent_hooks_failed = %v after the retry succeeded", got)
	}
	if got := harness.Sum(cp.Scrape(), "mesh_nodes", "state=failing"); got != 0 {
		t.Errorf("mesh_nodes{state=failing} = %v after the retry succeeded", got)
	}
	if got := harness.Sum(cp.Scrape(), "mesh_nodes_errors", "code=hook_failed"); got != 0 {
		t.Errorf("mesh_nodes_errors{code=hook_failed} = %v after the retry succeeded", got)
	}
	if err := nodeStatesAgree(cp); err != nil {
		t.Errorf("after the retry: %v", err)
	}

	// The agent stopped: offline; started again: alive, offline back to where it was.
	offline := harness.Sum(cp.Scrape(), "mesh_nodes", "state=offline")
	h.Process().Kill()
	harness.Eventually(t, 15*time.Second, "web-1 counted offline", func() bool {
		return harness.Sum(cp.Scrape(), "mesh_nodes", "state=offline") == offline+1
	})
	if err := nodeStatesAgree(cp); err != nil {
		t.Errorf("with web-1 stopped: %v", err)
	}
	h.Run("--hooks", hooksFile, "--metrics-listen", agentAddr)
	harness.Eventually(t, 20*time.Second, "web-1 counted alive again", func() bool {
		f := cp.Scrape()
		return harness.Sum(f, "mesh_nodes", "state=offline") == offline && harness.Sum(f, "mesh_nodes", "state=alive") == 1
	})
	if err := nodeStatesAgree(cp); err != nil {
		t.Errorf("with web-1 back: %v", err)
	}
}

var docMentionRE = regexp.MustCompile(`(mesh_[a-z_]+)(\{[^}]*\})?`)
var docLabelRE = regexp.MustCompile(`([a-z_]+)=`)

// TestDocsNameOnlyDocumentedMetrics: every metric the docs name anywhere (the
// troubleshooting table, decision records, security.md), and every label they select
// it by, is one the metrics tables document, which TestMetricsMatchTheOperationsGuide
// holds to what the binaries expose: a renamed metric or label cannot linger in an
// alert an operator copied from the docs.
func TestDocsNameOnlyDocumentedMetrics(t *testing.T) {
	control, agent := documentedMetrics(t)
	files, _ := filepath.Glob("../docs/*.md")
	decisions, _ := filepath.Glob("../docs/decisions/*.md")
	files = append(append(files, decisions...), "../README.md")
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range docMentionRE.FindAllStringSubmatch(string(raw), -1) {
			if strings.HasSuffix(m[1], "_") { // a prefix: mesh_raft_*
				continue
			}
			d, ok := control[m[1]]
			if !ok {
				d, ok = agent[m[1]]
			}
			if !ok {
				t.Errorf("%s names %s, which the metrics tables of docs/operations.md do not document", filepath.Base(f), m[0])
				continue
			}
			for _, l := range docLabelRE.FindAllStringSubmatch(m[2], -1) {
				if !slices.Contains(d.labels, l[1]) {
					t.Errorf("%s selects %s by label %s, which it does not have (its labels: %v)", filepath.Base(f), m[1], l[1], d.labels)
				}
			}
		}
	}
}

// TestFollowerCountsNodesAlive: every control node is scraped, and the followers hear
// no status reports (the leader handles them). A host connected and reporting is
// alive in every control node's mesh_nodes, as meshctl nodes shows it, not offline on
// the followers once it has been connected longer than --offline-after; and it is
// offline on every one once its agent stops.
func TestFollowerCountsNodesAlive(t *testing.T) {
	t.Parallel()
	cp1 := harness.NewControlPlane(t, bin, "follower")
	cp1.Serve()
	cp2 := joinControl(t, cp1, "cp-2")
	h := harness.NewHost(t, bin, "web-1")
	if r := h.Enrol(cp1.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	h.Run()
	cp1.WaitConverged("web-1", 0, 20*time.Second)
	time.Sleep(5 * time.Second) // past the harness's --offline-after 3s
	for _, cp := range []*harness.ControlPlane{cp1, cp2} {
		f := cp.Scrape()
		if alive, offline := harness.Sum(f, "mesh_nodes", "state=alive"), harness.Sum(f, "mesh_nodes", "state=offline"); alive != 1 || offline != 0 {
			t.Errorf("%s (leader %v): mesh_nodes alive %v, offline %v with web-1 connected and reporting; meshctl nodes says alive",
				filepath.Base(cp.Dir), harness.Sum(f, "mesh_raft_leader"), alive, offline)
		}
	}
	h.Process().Kill()
	for _, cp := range []*harness.ControlPlane{cp1, cp2} {
		harness.Eventually(t, 15*time.Second, filepath.Base(cp.Dir)+" counts web-1 offline", func() bool {
			f := cp.Scrape()
			return harness.Sum(f, "mesh_nodes", "state=offline") == 1 && harness.Sum(f, "mesh_nodes", "state=alive") == 0
		})
	}
}

// TestNewLeaderCountsNodesAlive: the leader fails over. The new leader heard no
// reports while it followed; a host still connected to a broker that stays up and
// reporting at its own pace (here every 30 s) is alive on it at once, not offline
// until its next report because its connection is older than --offline-after.
func TestNewLeaderCountsNodesAlive(t *testing.T) {
	t.Parallel()
	cps := threeControlNodes(t, "newleader")
	const n = 6
	for i := range n {
		name := fmt.Sprintf("web-%d", i)
		h := harness.NewHost(t, bin, name)
		if r := h.Enrol(cps[0].Token(name)); r.Code != 0 {
			t.Fatalf("enrol %s: %s", name, r.Combined())
		}
		h.Run("--heartbeat", "30s")
		cps[0].WaitConverged(name, 0, 20*time.Second)
	}
	leader := -1
	harness.Eventually(t, 10*time.Second, "a leader and every host counted", func() bool {
		held := 0
		for i, cp := range cps {
			f := cp.Scrape()
			if harness.Sum(f, "mesh_raft_leader") == 1 {
				leader = i
			}
			held += int(harness.Sum(f, "mesh_broker_host_connections"))
		}
		return leader >= 0 && held == n
	})
	onOthers := 0
	for i, cp := range cps {
		if i != leader {
			onOthers += int(cp.Counter("mesh_broker_host_connections"))
		}
	}
	if onOthers == 0 {
		t.Skip("every host is connected to the leader's broker: a failover shows nothing here")
	}
	time.Sleep(4 * time.Second) // the connections are older than the harness's --offline-after 3s
	cps[leader].Process().Kill()
	up := others(cps, leader)
	var next *harness.ControlPlane
	harness.Eventually(t, 20*time.Second, "a new leader", func() bool {
		for _, cp := range up {
			if cp.Counter("mesh_raft_leader") == 1 {
				next = cp
				return true
			}
		}
		return false
	})
	// Within a few seconds of taking over (the hosts on the killed broker reconnect
	// meanwhile), far less than the hosts' 30 s between reports.
	harness.Eventually(t, 10*time.Second, "the new leader counts every host alive", func() bool {
		f := next.Scrape()
		return harness.Sum(f, "mesh_nodes", "state=alive") == n && harness.Sum(f, "mesh_nodes", "state=offline") == 0
	})
	// It sends the hosts the signed list of brokers once: the leader before it may
	// have died between committing a change of control nodes and sending the list,
	// and hosts then dialled a removed broker for as long as they stayed connected.
	next.Process().WaitOutput(t, "a new leader told hosts the brokers", 10*time.Second)
}
