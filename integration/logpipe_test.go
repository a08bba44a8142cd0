package integration

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/integration/harness"
)

// TestALogPipeThatClosesDoesNotKillTheDaemons: `meshctl serve 2>&1 | tee log` and
// `meshhost run … | tee`, stopped with Ctrl-C, which ends tee first: the daemon's
// next log line goes to a pipe nobody reads. SIGPIPE's default ended each at once
// (status 141 in a shell), skipping its clean stop: no hand-over, a running hook
// left unsignalled (a review). Now the write fails and the stop goes on: exit 0.
func TestALogPipeThatClosesDoesNotKillTheDaemons(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "logpipe")
	first := cp.Serve()
	web := harness.NewHost(t, bin, "web-1")
	if r := web.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	first.Signal(syscall.SIGTERM)
	if code := first.Wait(20 * time.Second); code != 0 {
		t.Fatalf("serve exited %d on SIGTERM:\n%s", code, first.Output())
	}

	start := func(path string, args ...string) *exec.Cmd {
		t.Helper()
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(path, args...)
		cmd.Stdout, cmd.Stderr = w, w
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		w.Close()
		buf := make([]byte, 512)
		r.Read(buf) // it has started logging
		r.Close()   // and whatever reads its log is gone
		return cmd
	}
	stop := func(name string, cmd *exec.Cmd) {
		t.Helper()
		time.Sleep(time.Second)
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				t.Errorf("%s with its log's pipe closed, stopped with SIGTERM: %v (%s), want exit 0", name, err, ee.ProcessState)
			} else if err != nil {
				t.Errorf("%s: %v", name, err)
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Errorf("%s did not stop within 30 s of SIGTERM", name)
		}
	}
	serve := start(bin.Meshctl, "serve", "--data", cp.Dir, "--raft-heartbeat", "300ms", "--metrics-listen", cp.Metrics)
	harness.Eventually(t, 20*time.Second, "serve answers", func() bool { return cp.Ctl("nodes").Code == 0 })
	agent := start(bin.Meshhost, "run", "--state", web.State, "--root", web.Root, "--heartbeat", "1s")
	stop("meshhost run", agent)
	stop("meshctl serve", serve)
}

// TestAHookGetsSIGPIPEAsAnyCommandDoes: the agent catches SIGPIPE (a closed log
// pipe must not end it), but what it runs must not inherit the signal ignored: a
// hook's `yes | head -1` then ran until the hook's timeout (a review, with
// signal.Ignore). The hook ends at once, and its process starts with SIGPIPE's
// default.
func TestAHookGetsSIGPIPEAsAnyCommandDoes(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "hookpipe")
	cp.Serve()
	h := harness.NewHost(t, bin, "web-1")
	if r := h.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	dir := t.TempDir()
	mask := filepath.Join(dir, "sigign")
	hooksFile := filepath.Join(dir, "hooks.json")
	writeFile(t, hooksFile, `{"hooks":[{"name":"pipe","paths":["etc/*"],"timeout":"30s","run":["sh","-c",`+
		`"grep SigIgn /proc/self/status > `+mask+`; yes | head -1 > /dev/null"]}]}`)
	h.Run("--hooks", hooksFile)
	body := filepath.Join(dir, "app.json")
	writeFile(t, body, `{"files":[{"path":"etc/app.conf","content":"x\n"}]}`)
	start := time.Now()
	if r := cp.Ctl("declare", "--node", "web-1", "--file", body, "--wait", "25s"); r.Code != 0 {
		t.Fatalf("declare --wait with a hook running `yes | head -1`: exit %d after %s:\n%s", r.Code, time.Since(start), r.Combined())
	}
	if waited := time.Since(start); waited > 15*time.Second {
		t.Errorf("the hook took %s: `yes` did not end with its pipe", waited)
	}
	data, err := os.ReadFile(mask)
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(data))
	ignored, err := strconv.ParseUint(fields[len(fields)-1], 16, 64)
	if err != nil {
		t.Fatalf("SigIgn line %q: %v", data, err)
	}
	if ignored&(1<<(uint(syscall.SIGPIPE)-1)) != 0 {
		t.Errorf("the hook started with SIGPIPE ignored (SigIgn %s)", strings.TrimSpace(string(data)))
	}
}
