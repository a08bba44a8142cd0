package integration

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/integration/harness"
)

// TestMovingALoneControlNode: a mesh of one control node moved to another address
// as operations.md says (join one at the new address, remove the old). Removing
// the old one, the only voter and so the leader, was refused with "stop it;
// another control node takes over": none could, the new node being a nonvoter
// (two voters stop when either stops), and stopping it left no leader. The refusal
// now says so and what does work: three voters first. Followed, the move
// completes. The built binaries.
func TestMovingALoneControlNode(t *testing.T) {
	cp1 := harness.NewControlPlane(t, bin, "lone")
	cp1.Serve()
	cp2 := joinControl(t, cp1, "cp-2")
	r := cp2.Ctl("control", "remove", "cp-1")
	if r.Code != 4 || !strings.Contains(r.Stderr, "the only voter") || strings.Contains(r.Stderr, "another control node takes over") ||
		!strings.Contains(r.Stderr, "three voters") {
		t.Fatalf("control remove of the lone voter (exit %d, want 4 saying it is the only voter and to make three first):\n%s", r.Code, r.Combined())
	}
	// The advice: a third control node, then stop the old one and remove it.
	joinControl(t, cp1, "cp-3")
	cp1.Process().Signal(syscall.SIGTERM)
	if code := cp1.Process().Wait(10 * time.Second); code != 0 {
		t.Fatalf("cp-1 exited %d on SIGTERM", code)
	}
	if r := cp2.Ctl("control", "remove", "cp-1"); r.Code != 0 {
		t.Fatalf("control remove cp-1 once three voters served (exit %d):\n%s", r.Code, r.Combined())
	}
}
