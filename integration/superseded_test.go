package integration

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/integration/harness"
)

// TestDeclareWaitSaysItWasSuperseded, with the built binaries: an operator waits on
// a declaration while another declares the same node another body. The first wait
// ends at once, exit 5, saying the node was declared another body since; it used to
// count the node converged on the first once it applied the second (two operators
// declaring at once were both told "converged", the node holding one body).
func TestDeclareWaitSaysItWasSuperseded(t *testing.T) {
	t.Parallel() // mostly waits: see TestMain
	cp, web := servedHost(t, "superseded", "web-1")
	// The agent is not running: the first declaration stays unapplied, so the
	// outcome does not depend on how fast the node applies it.
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")
	writeFile(t, a, `{"files":[{"path":"app.conf","content":"A"}]}`)
	writeFile(t, b, `{"files":[{"path":"app.conf","content":"B"}]}`)
	waitEndedBy(t, cp, a, "another declaration", func() {
		if r := cp.Ctl("declare", "--node", "web-1", "--file", b); r.Code != 0 {
			t.Fatalf("the second declaration: %s", r.Combined())
		}
	}, "1 declared another body since (this one is no longer what they are to hold): web-1 (v2)", "1 superseded")
	// Declared the same body again, the wait is not superseded: it converges.
	web.Run()
	if r := cp.Ctl("declare", "--node", "web-1", "--file", b, "--wait", "30s"); r.Code != 0 {
		t.Fatalf("the same body again: exit %d:\n%s", r.Code, r.Combined())
	}
}

// TestDeclareWaitSaysItWasRevoked, with the built binaries: an operator waits on a
// declaration to a node another operator revokes meanwhile. The wait ends at once,
// exit 5, saying the node was revoked; it used to wait out its whole deadline and
// then call the node offline.
func TestDeclareWaitSaysItWasRevoked(t *testing.T) {
	t.Parallel() // mostly waits: see TestMain
	cp, _ := servedHost(t, "revokedwait", "web-1")
	// The agent is not running: the declaration stays unapplied.
	body := filepath.Join(t.TempDir(), "a.json")
	writeFile(t, body, `{"files":[{"path":"app.conf","content":"A"}]}`)
	waitEndedBy(t, cp, body, "a revocation", func() {
		if r := cp.Ctl("revoke", "web-1"); r.Code != 0 {
			t.Fatalf("revoke: %s", r.Combined())
		}
	}, "1 revoked since (they will not apply it): web-1 (at ", "1 revoked")
}

// waitEndedBy declares file to web-1 with --wait 60s, runs what a second into the
// wait, and checks the wait ends soon after, exit 5, its stderr saying each of want.
func waitEndedBy(t *testing.T, cp *harness.ControlPlane, file, what string, interrupt func(), want ...string) {
	t.Helper()
	waited := make(chan harness.Result, 1)
	start := time.Now()
	go func() { waited <- cp.Ctl("declare", "--node", "web-1", "--file", file, "--wait", "60s") }()
	time.Sleep(time.Second)
	interrupt()
	var r harness.Result
	select {
	case r = <-waited:
	case <-time.After(30 * time.Second):
		t.Fatalf("the wait did not end 30 s after %s", what)
	}
	for _, w := range want {
		if r.Code != ctlExitNotConverged || !strings.Contains(r.Stderr, w) {
			t.Fatalf("the wait ended by %s: exit %d, want %d saying %q:\n%s", what, r.Code, ctlExitNotConverged, w, r.Combined())
		}
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the wait ended by %s took %s, as if it waited for its deadline", what, took)
	}
}
