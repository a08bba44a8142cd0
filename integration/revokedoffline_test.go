package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/integration/harness"
)

// TestRevokedWhileOfflineStopsOnTheSignedNotice: a host revoked while its agent was
// stopped never heard the notice sent at the revocation. When it runs again, the
// broker lets its key in for a few seconds, in an account of its own, where its sync
// is answered with the signed notice: the agent stops (exit 6) on that, and records
// a signed revocation. It no longer stops on bare refusals, which anyone holding a
// leaf of the mesh CA could make (host/agent TestUnsignedRefusalsDoNotStopTheAgent).
func TestRevokedWhileOfflineStopsOnTheSignedNotice(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "offline")
	cp.Serve()
	h := harness.NewHost(t, bin, "web-1")
	if r := h.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	agent := h.Run()
	agent.WaitOutput(t, "connected to the mesh", 20*time.Second)
	agent.Signal(syscall.SIGTERM)
	if code := agent.Wait(10 * time.Second); code != 0 {
		t.Fatalf("the agent stopped with exit %d:\n%s", code, agent.Output())
	}
	if r := cp.Ctl("revoke", "web-1"); r.Code != 0 {
		t.Fatalf("revoke: %s", r.Combined())
	}

	again := h.Run()
	if code := again.Wait(20 * time.Second); code != 6 {
		t.Fatalf("the agent of a node revoked while it was stopped exited %d, want 6 (-1: still running):\n%s", code, again.Output())
	}
	if out := again.Output(); !strings.Contains(out, "revoked at") {
		t.Errorf("the agent did not say it was revoked:\n%s", out)
	}
	// What the agent does as it connects (it reports its status) is no violation:
	// a revoked host coming back is an ordinary day, not an error in the log.
	if out := cp.Process().Output(); strings.Contains(out, "Violation") {
		t.Errorf("the revoked agent's return was logged as a violation:\n%s", out)
	}
	data, err := os.ReadFile(filepath.Join(h.State, "revoked.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Signed bool `json:"signed"`
	}
	if err := json.Unmarshal(data, &rec); err != nil || !rec.Signed {
		t.Fatalf("revoked.json records no signed revocation (%v): %s", err, data)
	}
}
