package integration

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"mesh/integration/harness"
)

// httpStatus is the status code of a GET on url, or 0 when nothing answers.
func httpStatus(url string) int {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// httpBody GETs url and returns its body ("" if it cannot).
func httpBody(t *testing.T, url string) string {
	t.Helper()
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return string(b)
}

// TestMetricsEndpoints scrapes the control plane's and an agent's /metrics, /healthz
// and /readyz through a node's life: enrolled, declared to, refused a reused token, and
// cut off from the mesh. Every figure asserted is one the run changed.
func TestMetricsEndpoints(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "metrics")
	cp.Serve()
	cpURL := "http://" + cp.Metrics
	if code := httpStatus(cpURL + "/healthz"); code != http.StatusOK {
		t.Fatalf("control /healthz: %d", code)
	}
	if code := httpStatus(cpURL + "/readyz"); code != http.StatusOK {
		t.Fatalf("control /readyz on a serving single node: %d", code)
	}
	before := cp.Scrape()
	// Whose scrape and readiness it is: another process on the port (another
	// mesh's control node) answered for this one unseen (a review).
	if v := harness.Sum(before, "mesh_build_info", "mesh=metrics", "node=cp-1"); v != 1 {
		t.Errorf("mesh_build_info{mesh=metrics,node=cp-1} = %v, want 1", v)
	}
	if b := httpBody(t, cpURL+"/readyz"); b != "ready: control node cp-1 of mesh metrics\n" {
		t.Errorf("control /readyz says %q", b)
	}
	if v := harness.Sum(before, "mesh_raft_leader"); v != 1 {
		t.Fatalf("mesh_raft_leader = %v on the only control node", v)
	}
	if v := harness.Sum(before, "mesh_control_nodes", "raft_role=leader"); v != 1 {
		t.Fatalf("mesh_control_nodes{raft_role=leader} = %v", v)
	}

	token := cp.Token("web-1")
	h := harness.NewHost(t, bin, "web-1")
	if r := h.Enrol(token); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	agentAddr := fmt.Sprintf("127.0.0.1:%d", harness.FreePorts(t, 1)[0])
	agentURL := "http://" + agentAddr
	h.Run("--metrics-listen", agentAddr)
	harness.Eventually(t, 20*time.Second, "the agent's /readyz answers 200", func() bool {
		return httpStatus(agentURL+"/readyz") == http.StatusOK
	})
	if code := httpStatus(agentURL + "/healthz"); code != http.StatusOK {
		t.Fatalf("agent /healthz: %d", code)
	}
	if b := httpBody(t, agentURL+"/readyz"); b != "ready: node web-1 of mesh metrics\n" {
		t.Errorf("agent /readyz says %q", b)
	}
	if v := harness.Sum(harness.Scrape(t, agentURL+"/metrics"), "mesh_agent_build_info", "mesh=metrics", "node=web-1"); v != 1 {
		t.Errorf("mesh_agent_build_info{mesh=metrics,node=web-1} = %v, want 1", v)
	}

	body := filepath.Join(t.TempDir(), "b.json")
	writeFile(t, body, `{"files":[{"path":"app.conf","content":"one"}]}`)
	if r := cp.Ctl("declare", "--node", "web-1", "--file", body); r.Code != 0 {
		t.Fatalf("declare: %s", r.Combined())
	}
	cp.WaitConverged("web-1", 1, 20*time.Second)

	var agent map[string]*dto.MetricFamily
	harness.Eventually(t, 10*time.Second, "the agent reports v1 applied", func() bool {
		agent = harness.Scrape(t, agentURL+"/metrics")
		return harness.Sum(agent, "mesh_agent_applied_version") == 1
	})
	for _, c := range []struct {
		name string
		want float64
	}{
		{"mesh_agent_declarations_applied_total", 1}, // v1: the empty v0 was recorded as applied at enrolment
		{"mesh_agent_connected", 1},
		{"mesh_agent_synced", 1},
		{"mesh_agent_stale", 0},
		{"mesh_agent_keyring_epoch", 1},
	} {
		if got := harness.Sum(agent, c.name); got != c.want {
			t.Errorf("agent %s = %v, want %v", c.name, got, c.want)
		}
	}
	// meshhost run uses one core unless GOMAXPROCS, which it inherits from the test,
	// says otherwise.
	if os.Getenv("GOMAXPROCS") == "" {
		if got := harness.Sum(agent, "go_sched_gomaxprocs_threads"); got != 1 {
			t.Errorf("agent go_sched_gomaxprocs_threads = %v, want 1", got)
		}
	}
	if got := harness.Sum(agent, "mesh_agent_last_apply_duration_seconds"); got <= 0 {
		t.Errorf("agent mesh_agent_last_apply_duration_seconds = %v after an apply", got)
	}

	// The token is spent: a second machine presenting it is refused, and counted.
	other := harness.NewHost(t, bin, "web-1-copy")
	if r := other.Enrol(token); r.Code == 0 {
		t.Fatalf("a used token enrolled a second machine: %s", r.Combined())
	}

	// The refused machine's connection is counted until nats-server's event of its
	// closing reaches the control plane, which can trail the refusal's answer.
	harness.Eventually(t, 5*time.Second, "the refused enrolment's connection no longer counted", func() bool {
		return harness.Sum(cp.Scrape(), "mesh_control_host_connections") == 1
	})
	after := cp.Scrape()
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"mesh_control_enrolments_total", []string{"kind=host"}, 1},
		{"mesh_control_declarations_issued_total", nil, 1},
		{"mesh_control_fanout_duration_seconds", nil, 1}, // the histogram's count
		{"mesh_nodes", []string{"state=alive"}, 1},
		{"mesh_nodes", []string{"state=converged"}, 1},
		{"mesh_nodes", []string{"state=behind"}, 0},
		{"mesh_nodes", []string{"state=revoked"}, 0},
		{"mesh_control_host_connections", nil, 1},
	} {
		got := histogramCountOr(after, c.name, c.labels...)
		if got != c.want {
			t.Errorf("control %s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if got := harness.Sum(after, "mesh_control_requests_refused_total", "subject=enrol", "reason=token_used"); got < 1 {
		t.Errorf("the reused token is not counted: mesh_control_requests_refused_total{subject=enrol,reason=token_used} = %v", got)
	}
	for _, name := range []string{"mesh_raft_commit_index", "mesh_raft_applied_index", "mesh_raft_term", "mesh_broker_connections"} {
		if got, was := harness.Sum(after, name), harness.Sum(before, name); got <= 0 || (name == "mesh_raft_commit_index" && got <= was) {
			t.Errorf("control %s = %v (before enrolment %v)", name, got, was)
		}
	}
	if got, was := harness.Sum(after, "mesh_broker_messages_total", "direction=in"), harness.Sum(before, "mesh_broker_messages_total", "direction=in"); got <= was {
		t.Errorf("mesh_broker_messages_total{direction=in} did not grow: %v → %v", was, got)
	}
	if got := histogramCountOr(after, "mesh_raft_apply_duration_seconds"); got < 2 {
		t.Errorf("mesh_raft_apply_duration_seconds counts %v commands after an enrolment and a declaration", got)
	}

	// The control plane gone, the agent is alive but not ready, and says why.
	cp.Process().Kill()
	harness.Eventually(t, 15*time.Second, "the agent's /readyz answers 503", func() bool {
		return httpStatus(agentURL+"/readyz") == http.StatusServiceUnavailable
	})
	if code := httpStatus(agentURL + "/healthz"); code != http.StatusOK {
		t.Fatalf("agent /healthz while disconnected: %d", code)
	}
	if got := harness.Sum(harness.Scrape(t, agentURL+"/metrics"), "mesh_agent_connected"); got != 0 {
		t.Fatalf("mesh_agent_connected = %v with no broker", got)
	}
}

// histogramCountOr is a histogram's sample count, or harness.Sum for any other kind.
func histogramCountOr(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	if f, ok := fams[name]; ok && f.GetType() == dto.MetricType_HISTOGRAM {
		total := 0.0
		for _, m := range f.GetMetric() {
			total += float64(m.GetHistogram().GetSampleCount())
		}
		return total
	}
	return harness.Sum(fams, name, labels...)
}
