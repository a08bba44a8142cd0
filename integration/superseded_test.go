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
	cp := harness.NewControlPlane(t, bin, "superseded")
	cp.Serve()
	web := harness.NewHost(t, bin, "web-1")
	if r := web.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	// The agent is not running: the first declaration stays unapplied, so the
	// outcome does not depend on how fast the node applies it.
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")
	writeFile(t, a, `{"files":[{"path":"app.conf","content":"A"}]}`)
	writeFile(t, b, `{"files":[{"path":"app.conf","content":"B"}]}`)
	first := make(chan harness.Result, 1)
	start := time.Now()
	go func() { first <- cp.Ctl("declare", "--node", "web-1", "--file", a, "--wait", "60s") }()
	time.Sleep(time.Second)
	if r := cp.Ctl("declare", "--node", "web-1", "--file", b); r.Code != 0 {
		t.Fatalf("the second declaration: %s", r.Combined())
	}
	var r harness.Result
	select {
	case r = <-first:
	case <-time.After(30 * time.Second):
		t.Fatal("the first wait did not end 30 s after the second declaration")
	}
	if r.Code != ctlExitNotConverged || !strings.Contains(r.Stderr, "web-1 was declared another body since (v2)") || !strings.Contains(r.Stderr, "1 superseded") {
		t.Fatalf("the superseded wait: exit %d, want %d naming v2:\n%s", r.Code, ctlExitNotConverged, r.Combined())
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the superseded wait took %s, as if it waited for its deadline", took)
	}
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
	cp := harness.NewControlPlane(t, bin, "revokedwait")
	cp.Serve()
	web := harness.NewHost(t, bin, "web-1")
	if r := web.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	// The agent is not running: the declaration stays unapplied.
	body := filepath.Join(t.TempDir(), "a.json")
	writeFile(t, body, `{"files":[{"path":"app.conf","content":"A"}]}`)
	waited := make(chan harness.Result, 1)
	start := time.Now()
	go func() { waited <- cp.Ctl("declare", "--node", "web-1", "--file", body, "--wait", "60s") }()
	time.Sleep(time.Second)
	if r := cp.Ctl("revoke", "web-1"); r.Code != 0 {
		t.Fatalf("revoke: %s", r.Combined())
	}
	var r harness.Result
	select {
	case r = <-waited:
	case <-time.After(30 * time.Second):
		t.Fatal("the wait did not end 30 s after the revocation")
	}
	if r.Code != ctlExitNotConverged || !strings.Contains(r.Stderr, "web-1 was revoked at") || !strings.Contains(r.Stderr, "1 revoked") {
		t.Fatalf("the wait on a revoked node: exit %d, want %d saying it was revoked:\n%s", r.Code, ctlExitNotConverged, r.Combined())
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the wait took %s, as if it waited for its deadline", took)
	}
}
