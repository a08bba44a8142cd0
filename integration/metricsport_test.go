package integration

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"mesh/integration/harness"
)

// TestAMetricsAddressHeldByAnotherProcess, with the built binaries: any local user
// may bind a loopback port first, and a local audit kept an agent from starting at
// all by holding its metrics port (`meshhost run` exited 1, systemd restarting it
// into the same failure), while that user's process answered /readyz "ready" in its
// place. The agent and a control node now start and do their work without the
// endpoint, say in their logs that another process holds the address, and serve it
// once it is free. A request header over 8 KiB is refused (Go's 1 MiB default let
// that user hold 64 MiB of the agent with 64 connections).
func TestAMetricsAddressHeldByAnotherProcess(t *testing.T) {
	t.Parallel() // mostly waits: see TestMain
	cp := harness.NewControlPlane(t, bin, "metricsport")
	squatCP, err := net.Listen("tcp", cp.Metrics)
	if err != nil {
		t.Fatal(err)
	}
	cp.Serve()
	cp.Process().WaitOutput(t, "the metrics endpoint's address is held by another process", 10*time.Second)

	h := harness.NewHost(t, bin, "web-1")
	if r := h.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	agentAddr := fmt.Sprintf("127.0.0.1:%d", harness.FreePorts(t, 1)[0])
	squatAgent, err := net.Listen("tcp", agentAddr)
	if err != nil {
		t.Fatal(err)
	}
	h.Run("--metrics-listen", agentAddr)
	body := t.TempDir() + "/b.json"
	writeFile(t, body, `{"files":[{"path":"f","content":"applied\n"}]}`)
	if r := cp.Ctl("declare", "--node", "web-1", "--file", body, "--wait", "30s"); r.Code != 0 {
		t.Fatalf("declare while the agent's metrics address is held: exit %d:\n%s", r.Code, r.Combined())
	}
	h.Process().WaitOutput(t, "the metrics endpoint's address is held by another process", 10*time.Second)

	squatCP.Close()
	squatAgent.Close()
	for _, addr := range []string{cp.Metrics, agentAddr} {
		harness.Eventually(t, 20*time.Second, "the metrics endpoint at "+addr+" served once free", func() bool {
			resp, err := http.Get("http://" + addr + "/metrics")
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
		req, _ := http.NewRequest("GET", "http://"+addr+"/metrics", nil)
		req.Header.Set("X-Filler", strings.Repeat("a", 16<<10))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: a request with a 16 KiB header: %v", addr, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("%s: a request with a 16 KiB header: %s, want 431", addr, resp.Status)
		}
	}
}
