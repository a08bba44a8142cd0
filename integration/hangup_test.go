package integration

import (
	"syscall"
	"testing"
	"time"

	"mesh/integration/harness"
)

// TestAHangupStopsNothing: SIGHUP (a closed terminal, `kill -HUP`, a log-rotation
// script's reload) ended `meshctl serve` and `meshhost run` at once: no hand-over, no
// stop line, exit status 129, which systemd counts a clean stop, so their units stayed
// down (found by an audit of the daemons' signals). Both now log that they ignore it
// and go on: the control plane answers, the agent applies a declaration after it, and
// SIGTERM still stops each cleanly. The built binaries.
func TestAHangupStopsNothing(t *testing.T) {
	t.Parallel() // mostly waits: see TestMain
	cp := harness.NewControlPlane(t, bin, "hangup")
	cp.Serve()
	h := harness.NewHost(t, bin, "web-1")
	if r := h.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol (exit %d):\n%s", r.Code, r.Combined())
	}
	agent := h.Run()
	agent.WaitOutput(t, "connected to the mesh", 20*time.Second) // its handlers set
	cp.Process().Signal(syscall.SIGHUP)
	agent.Signal(syscall.SIGHUP)
	cp.Process().WaitOutput(t, "SIGHUP ignored", 10*time.Second)
	agent.WaitOutput(t, "SIGHUP ignored", 10*time.Second)
	body := t.TempDir() + "/body.json"
	writeFile(t, body, `{"files":[{"path":"etc/after-hup.conf","content":"still here\n"}]}`)
	if r := cp.Ctl("declare", "--node", "web-1", "--file", body, "--wait", "30s"); r.Code != 0 {
		t.Fatalf("declare after the hangups (exit %d):\n%s", r.Code, r.Combined())
	}
	if got, err := h.ReadManaged("etc/after-hup.conf"); err != nil || got != "still here\n" {
		t.Fatalf("the agent did not apply the declaration after its hangup: %q, %v", got, err)
	}
	agent.Signal(syscall.SIGTERM)
	if code := agent.Wait(20 * time.Second); code != 0 {
		t.Fatalf("the agent stopped with exit %d after SIGTERM, want 0", code)
	}
	cp.Process().Signal(syscall.SIGTERM)
	if code := cp.Process().Wait(30 * time.Second); code != 0 {
		t.Fatalf("serve stopped with exit %d after SIGTERM, want 0", code)
	}
}
