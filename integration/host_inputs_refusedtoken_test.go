package integration

import (
	"errors"
	"os"
	"strings"
	"testing"

	"mesh/host/identity"
	"mesh/integration/harness"
)

// TestARefusedTokenLeavesNoPendingKey: `meshhost enrol` with a token the mesh
// refuses for good (used, expired) exits 3 and leaves no pending key behind: before,
// enrol-pending.json (an nkey seed) stayed, and `meshhost status` advised running
// enrol again with the same token, which cannot work. status then says the machine
// is not enrolled, without that advice.
func TestARefusedTokenLeavesNoPendingKey(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "refusedtoken")
	cp.Serve()
	used := cp.Token("used-1")
	if r := harness.NewHost(t, bin, "used-1").Enrol(used); r.Code != 0 {
		t.Fatalf("first use: %s", r.Combined())
	}
	h := harness.NewHost(t, bin, "again")
	r := h.Enrol(used)
	if r.Code != hostExitToken || !strings.Contains(r.Combined(), "token_used") {
		t.Fatalf("a used token: exit %d, want %d (token_used):\n%s", r.Code, hostExitToken, r.Combined())
	}
	if !strings.Contains(r.Stdout, "removed the pending key") {
		t.Errorf("enrol does not say it removed the pending key:\n%s", r.Combined())
	}
	if _, err := os.Lstat(identity.PendingPath(h.State)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused enrolment left its pending key: %v", err)
	}
	s := harness.Run(t, "", nil, bin.Meshhost, "status", "--state", h.State)
	if s.Code != hostExitIdentity || !strings.Contains(s.Stderr, "has not enrolled") || strings.Contains(s.Stderr, "same token") {
		t.Errorf("status after the refusal: exit %d, want %d, not enrolled, no advice to use the same token:\n%s", s.Code, hostExitIdentity, s.Combined())
	}
}
