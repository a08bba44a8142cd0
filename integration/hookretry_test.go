package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/integration/harness"
)

// TestFailedHookIsFailingUntilRetried: the operator's story with the built binaries.
// A declaration is applied but the service restart its hook runs fails: declare
// --wait and status exit 5 naming the node and the end of the hook's output, and
// meshhost status lists the hook failed and owed. The operator fixes the host and
// runs meshhost hooks retry there: the hook succeeds, and status shows the node
// converged. Declaring the same body again runs a failed hook again too. Before,
// declare --wait exited 0 ("converged") with the restart failed.
func TestFailedHookIsFailingUntilRetried(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "hookretry")
	cp.Serve()
	h := harness.NewHost(t, bin, "web-1")
	if r := h.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	dir := t.TempDir()
	fixed := filepath.Join(dir, "port-freed")
	hooksFile := filepath.Join(dir, "hooks.json")
	writeFile(t, hooksFile, `{"hooks":[{"name":"restart-app","paths":["etc/*.conf"],"run":["sh","-c",`+
		`"test -e `+fixed+` || { echo 'app.service: bind: port 8080 in use' >&2; exit 1; }"]},`+
		`{"name":"reload-db","paths":["db/*"],"run":["/nonexistent/bin/reload-db"]}]}`)
	metrics := fmt.Sprintf("127.0.0.1:%d", harness.FreePorts(t, 1)[0])
	h.Run("--hooks", hooksFile, "--metrics-listen", metrics)
	cp.WaitConverged("web-1", 0, 20*time.Second)
	// A command that cannot run is said as the agent starts, not at the first change.
	h.Process().WaitOutput(t, `a hook's command cannot be run now`, 10*time.Second)
	if !strings.Contains(h.Process().Output(), "reload-db") {
		t.Errorf("the warning does not name the hook:\n%s", h.Process().Output())
	}
	hooksFailed := func() float64 {
		return harness.Sum(harness.Scrape(t, "http://"+metrics+"/metrics"), "mesh_agent_hooks_failed")
	}

	body := filepath.Join(dir, "app.json")
	writeFile(t, body, `{"files":[{"path":"etc/app.conf","content":"port = 8080\n"}]}`)
	r := cp.Ctl("declare", "--node", "web-1", "--file", body, "--wait", "60s")
	if r.Code != 5 || !strings.Contains(r.Stderr, "1 failed hook_failed in hook restart-app (fix the host, then `meshhost hooks retry` there): web-1 (exit status 1: app.service: bind: port 8080 in use") ||
		!strings.Contains(r.Stderr, "meshhost hooks retry") {
		t.Fatalf("declare --wait with the hook failing: exit %d, want 5 naming the node and the hook's output:\n%s", r.Code, r.Combined())
	}
	if got, _ := h.ReadManaged("etc/app.conf"); got != "port = 8080\n" {
		t.Fatalf("etc/app.conf = %q: the declaration stays applied", got)
	}
	if r := cp.Ctl("status"); r.Code != 5 || !strings.Contains(r.Combined(), "1 failing hook_failed in hook restart-app (fix the host, then `meshhost hooks retry` there): web-1 (") ||
		!strings.Contains(r.Combined(), "port 8080 in use") {
		t.Fatalf("status with the hook failed: exit %d, want 5 naming it:\n%s", r.Code, r.Combined())
	}
	if got := hooksFailed(); got != 1 {
		t.Errorf("mesh_agent_hooks_failed = %v with the hook failed, want 1", got)
	}
	st := harness.Run(t, "", nil, bin.Meshhost, "status", "--state", h.State)
	if st.Code != 0 || !strings.Contains(st.Stdout, "FAILED: restart-app") || !strings.Contains(st.Stdout, "etc/app.conf") {
		t.Fatalf("meshhost status does not show the hook failed and owed (exit %d):\n%s", st.Code, st.Combined())
	}

	// Not fixed yet: the retry fails again, and says why.
	retry := func() harness.Result {
		return harness.Run(t, "", nil, bin.Meshhost, "hooks", "retry", "--state", h.State, "--timeout", "60s")
	}
	if r := retry(); r.Code != 1 || !strings.Contains(r.Stderr, "port 8080 in use") || !strings.Contains(r.Stdout, "ran restart-app; failed again: restart-app") ||
		!strings.Contains(r.Stderr, "meshhost hooks retry: a hook failed again") {
		t.Fatalf("retry before the fix: exit %d, want 1 with the hook's output:\n%s", r.Code, r.Combined())
	}
	// The operator frees the port, and retries.
	if err := os.WriteFile(fixed, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := retry(); r.Code != 0 || !strings.Contains(r.Stdout, "ran restart-app") {
		t.Fatalf("retry after the fix: exit %d:\n%s", r.Code, r.Combined())
	}
	harness.Eventually(t, 20*time.Second, "status shows web-1 converged", func() bool { return cp.Ctl("status").Code == 0 })
	if got := hooksFailed(); got != 0 {
		t.Errorf("mesh_agent_hooks_failed = %v once the hook succeeded, want 0", got)
	}
	if st := harness.Run(t, "", nil, bin.Meshhost, "status", "--state", h.State); strings.Contains(st.Stdout, "FAILED") || strings.Contains(st.Stdout, "owed") {
		t.Fatalf("meshhost status still shows hooks failed or owed:\n%s", st.Stdout)
	}

	// From the control plane: the hook fails again with the next change; once the
	// host is fixed, the same body declared again runs it, and converges.
	os.Remove(fixed)
	writeFile(t, body, `{"files":[{"path":"etc/app.conf","content":"port = 8081\n"}]}`)
	if r := cp.Ctl("declare", "--node", "web-1", "--file", body, "--wait", "60s"); r.Code != 5 || !strings.Contains(r.Stderr, "hook_failed") {
		t.Fatalf("declare --wait, hook failing again: exit %d:\n%s", r.Code, r.Combined())
	}
	if err := os.WriteFile(fixed, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := cp.Ctl("declare", "--node", "web-1", "--file", body, "--wait", "60s"); r.Code != 0 {
		t.Fatalf("the same body declared again after the fix: exit %d, want 0:\n%s", r.Code, r.Combined())
	}
	if r := cp.Ctl("status"); r.Code != 0 {
		t.Fatalf("status after the re-declaration: exit %d:\n%s", r.Code, r.Combined())
	}
}

// TestAHookLeftByAKilledAgentIsKilled, with the built binaries: meshhost run killed
// (SIGKILL, a crash) while a hook ran left the hook's processes running, and the
// agent started next ran the same hook beside them (under a supervisor without
// systemd's control group, a crash loop stacked copies). The next agent kills what
// is left of it, then runs the owed hook once.
func TestAHookLeftByAKilledAgentIsKilled(t *testing.T) {
	t.Parallel() // mostly waits: see TestMain
	cp, h := servedHost(t, "hookleft", "web-1")
	dir := t.TempDir()
	runs, pids := filepath.Join(dir, "runs"), filepath.Join(dir, "pids")
	hooksFile := filepath.Join(dir, "hooks.json")
	// Each run appends its pid, then works for a minute in a child.
	writeFile(t, hooksFile, `{"hooks":[{"name":"slow","paths":["etc/*"],"timeout":"2m","run":["sh","-c",`+
		`"echo run >> `+runs+`; sleep 60 & echo $! >> `+pids+`; wait"]}]}`)
	h.Run("--hooks", hooksFile)
	body := filepath.Join(dir, "a.json")
	writeFile(t, body, `{"files":[{"path":"etc/a.conf","content":"a"}]}`)
	if r := cp.Ctl("declare", "--node", "web-1", "--file", body); r.Code != 0 {
		t.Fatalf("declare: %s", r.Combined())
	}
	harness.Eventually(t, 20*time.Second, "the hook runs", func() bool {
		b, _ := os.ReadFile(pids)
		return strings.Count(string(b), "\n") == 1
	})
	h.Process().Kill()
	h.Run("--hooks", hooksFile)
	h.Process().WaitOutput(t, "was still running: killed it", 20*time.Second)
	harness.Eventually(t, 20*time.Second, "the owed hook runs again", func() bool {
		b, _ := os.ReadFile(pids)
		return strings.Count(string(b), "\n") == 2
	})
	b, _ := os.ReadFile(pids)
	first, _ := strconv.Atoi(strings.Fields(string(b))[0])
	harness.Eventually(t, 10*time.Second, "the first run's child is gone", func() bool {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", first))
		i := strings.LastIndexByte(string(st), ')')
		return err != nil || i > 0 && strings.HasPrefix(string(st[i+1:]), " Z")
	})
}

// TestHooksRetryInterrupted, with the built binaries: `meshhost hooks retry` stopped
// by SIGINT while the hook it asked for runs exits 9 and says the agent runs the
// hook on; it died with 130 and said nothing. The hook does run to its end.
func TestHooksRetryInterrupted(t *testing.T) {
	t.Parallel() // mostly waits: see TestMain
	cp, h := servedHost(t, "hookint", "web-1")
	dir := t.TempDir()
	fixed, started, done := filepath.Join(dir, "fixed"), filepath.Join(dir, "started"), filepath.Join(dir, "done")
	hooksFile := filepath.Join(dir, "hooks.json")
	// Fails until fixed; once fixed, says it started, takes 3 s and then says it is
	// done.
	writeFile(t, hooksFile, `{"hooks":[{"name":"slow","paths":["etc/*"],"run":["sh","-c",`+
		`"test -e `+fixed+` || exit 1; touch `+started+`; sleep 3; touch `+done+`"]}]}`)
	h.Run("--hooks", hooksFile)
	body := filepath.Join(dir, "a.json")
	writeFile(t, body, `{"files":[{"path":"etc/a.conf","content":"a"}]}`)
	if r := cp.Ctl("declare", "--node", "web-1", "--file", body, "--wait", "30s"); r.Code != ctlExitNotConverged {
		t.Fatalf("declare with the hook failing: exit %d, want %d:\n%s", r.Code, ctlExitNotConverged, r.Combined())
	}
	writeFile(t, fixed, "")
	retry := harness.Start(t, nil, bin.Meshhost, "hooks", "retry", "--state", h.State)
	// A failed hook is not tried again by itself: it runs because the retry asked,
	// and the retry waits for it.
	harness.Eventually(t, 20*time.Second, "the retried hook starts", func() bool {
		_, err := os.Stat(started)
		return err == nil
	})
	if retry.Exited() {
		t.Fatalf("hooks retry ended before the hook it asked for did:\n%s", retry.Output())
	}
	retry.Signal(syscall.SIGINT)
	if code := retry.Wait(10 * time.Second); code != hostExitInterrupted || !strings.Contains(retry.Output(), "the agent runs the hooks on") {
		t.Fatalf("hooks retry interrupted: exit %d, want %d saying the hooks run on:\n%s", code, hostExitInterrupted, retry.Output())
	}
	harness.Eventually(t, 20*time.Second, "the hook runs to its end", func() bool {
		_, err := os.Stat(done)
		return err == nil
	})
}
