package integration

import (
	"strings"
	"testing"
	"time"

	"mesh/integration/harness"
)

// TestARevokedHostStopsAfterARotation: a host revoked while its agent was stopped,
// with the signing key rotated and the old one retired meanwhile, is sent the
// signed notice when it comes back, as the guide says, and stops (exit 6). Before,
// the notice was signed with a key the agent did not trust yet, and the revoked
// account sent it no keyring to follow: it refused the notice, "so the agent
// carries on", and ran for ever on its last declaration, `meshhost status`
// saying connected and synced. The built binaries.
func TestARevokedHostStopsAfterARotation(t *testing.T) {
	t.Parallel() // mostly waits (the rotation, the agent's reconnections): see TestMain
	cp := harness.NewControlPlane(t, bin, "revrot")
	cp.Serve()
	h := harness.NewHost(t, bin, "web-1")
	if r := h.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol (exit %d):\n%s", r.Code, r.Combined())
	}
	if r := cp.Ctl("signing-key", "rotate"); r.Code != 0 {
		t.Fatalf("signing-key rotate (exit %d):\n%s", r.Code, r.Combined())
	}
	harness.Eventually(t, 20*time.Second, "the old signing key retired (the host is offline, so it does not hold the retirement)", func() bool {
		return cp.Ctl("signing-key", "retire").Code == 0
	})
	if r := cp.Ctl("revoke", "web-1"); r.Code != 0 {
		t.Fatalf("revoke (exit %d):\n%s", r.Code, r.Combined())
	}
	p := h.Run()
	if code := p.Wait(30 * time.Second); code != 6 {
		t.Fatalf("the revoked agent exited %d 30 s after it started, want 6 (-1: still running):\n%s", code, p.Output())
	}
	if out := p.Output(); !strings.Contains(out, "keyring accepted") {
		t.Errorf("the agent did not follow the keyrings before the notice:\n%s", out)
	}
	r := harness.Run(t, "", nil, bin.Meshhost, "status", "--state", h.State)
	if r.Code != 6 {
		t.Errorf("meshhost status of the revoked host exited %d, want 6:\n%s", r.Code, r.Combined())
	}
}
