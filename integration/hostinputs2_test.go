package integration

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/integration/harness"
)

// TestRunRefusesAManagedRootItCannotUse: an enrolled host's `meshhost run` with a
// --root that is a regular file or /dev/zero exits 5 at once, and a path whose
// parent does not exist 1 (a file system mounted later at boot: the unit restarts
// it, where 5 left the agent down for good), saying what is wrong, and writes nothing: before, it reported
// itself running and failed every apply a minute later (apply_failed), and a
// mistyped root was made, parents and all, with the declared files in it. A root
// whose parent exists is made, and the agent applies into it.
func TestRunRefusesAManagedRootItCannotUse(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "rootcheck")
	cp.Serve()
	web := harness.NewHost(t, bin, "web-1")
	if r := web.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	base := t.TempDir()
	os.Chmod(base, 0o755)
	file := filepath.Join(base, "afile")
	writeFile(t, file, "x")
	typo := filepath.Join(base, "nonexistent", "x")
	for root, want := range map[string]struct {
		code int
		says string
	}{
		file:        {hostExitIdentity, "is not a directory: it is a regular file"},
		"/dev/zero": {hostExitIdentity, "is not a directory: it is a character device"},
		typo:        {1, "does not exist: create it or fix the path"},
	} {
		start := time.Now()
		r := harness.Run(t, "", nil, bin.Meshhost, "run", "--state", web.State, "--root", root)
		if r.Code != want.code || !strings.Contains(r.Stderr, want.says) || strings.Contains(r.Combined(), "agent running") {
			t.Errorf("--root %s: exit %d, want %d and %q:\n%s", root, r.Code, want.code, want.says, r.Combined())
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("--root %s: refused after %s; it must come at once", root, took)
		}
	}
	if _, err := os.Lstat(filepath.Join(base, "nonexistent")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the mistyped root's parent was made: %v", err)
	}
	web.Root = filepath.Join(base, "managed")
	web.Run()
	body := filepath.Join(t.TempDir(), "body.json")
	writeFile(t, body, `{"files":[{"path":"etc/app.conf","content":"one"}]}`)
	cp.Ctl("declare", "--node", "web-1", "--file", body)
	cp.WaitConverged("web-1", 1, 30*time.Second)
	if got, err := web.ReadManaged("etc/app.conf"); err != nil || got != "one" {
		t.Fatalf("the root made at the start: etc/app.conf = %q, %v", got, err)
	}
}
