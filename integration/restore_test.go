package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/integration/harness"
)

// TestRestoreFromAnOlderBackup: a single control node restored from a copy of its
// data directory taken before its last declarations knows fewer versions than its
// host applied. The next declaration was given a version the host held with
// another body: the host refused it (replayed), and `declare --wait`, `status` and
// `nodes` called it converged, on a file that still said what the lost
// declaration said. Now the next version comes after the one the host reports,
// and a host that refuses the declared version as replayed is not converged.
// The built binaries, the backup taken and restored with `cp -a` as
// operations.md says.
func TestRestoreFromAnOlderBackup(t *testing.T) {
	t.Parallel()
	cp := harness.NewControlPlane(t, bin, "restore")
	cp.Serve()
	h := harness.NewHost(t, bin, "web-1")
	if r := h.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol (%d): %s", r.Code, r.Combined())
	}
	h.Run()
	dir := t.TempDir()
	declare := func(content string, extra ...string) harness.Result {
		t.Helper()
		f := filepath.Join(dir, content+".json")
		if err := os.WriteFile(f, []byte(`{"files":[{"path":"etc/app.conf","content":"`+content+`"}]}`), 0o600); err != nil {
			t.Fatal(err)
		}
		return cp.Ctl(append([]string{"declare", "--node", "web-1", "--file", f}, extra...)...)
	}
	stop := func() {
		t.Helper()
		cp.Process().Signal(syscall.SIGTERM)
		if code := cp.Process().Wait(10 * time.Second); code != 0 {
			t.Fatalf("serve exited %d on SIGTERM", code)
		}
	}
	restore := func(backup, to string) {
		t.Helper()
		if out, err := exec.Command("cp", "-a", backup, to).CombinedOutput(); err != nil {
			t.Fatalf("cp -a: %v %s", err, out)
		}
		cp.Dir = to
	}
	fileSays := func(want string) {
		t.Helper()
		harness.Eventually(t, 20*time.Second, "the host's file says "+want, func() bool {
			got, _ := h.ReadManaged("etc/app.conf")
			return got == want
		})
	}

	if r := declare("one", "--wait", "30s"); r.Code != 0 {
		t.Fatalf("declare one (%d): %s", r.Code, r.Combined())
	}
	stop()
	backup := filepath.Join(t.TempDir(), "backup")
	if out, err := exec.Command("cp", "-a", cp.Dir, backup).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v %s", err, out)
	}
	cp.Serve()
	if r := declare("two", "--wait", "30s"); r.Code != 0 {
		t.Fatalf("declare two (%d): %s", r.Code, r.Combined())
	}
	fileSays("two")

	// The machine is lost while the host is down; the backup comes back on a new
	// directory, and a declaration is made before the host returns: the control
	// plane cannot know the host holds v2, and gives this one v2 too.
	h.Process().Signal(syscall.SIGTERM)
	h.Process().Wait(10 * time.Second)
	stop()
	restore(backup, filepath.Join(t.TempDir(), "cp"))
	cp.Serve()
	if r := declare("three"); r.Code != 0 {
		t.Fatalf("declare three (%d): %s", r.Code, r.Combined())
	}
	h.Run()
	harness.Eventually(t, 20*time.Second, "web-1 reports the declaration refused as replayed", func() bool {
		n, ok := cp.Node("web-1")
		return ok && n.LastError != nil && n.LastError.Code == "replayed"
	})
	if got, _ := h.ReadManaged("etc/app.conf"); got != "two" {
		t.Fatalf("the host's file says %q, want two (v2 as it applied it)", got)
	}
	if n, _ := cp.Node("web-1"); n.Converged {
		t.Fatalf("web-1 shown converged on a declaration it refused: %+v", n)
	}
	if r := cp.Ctl("status"); r.Code != 5 || !strings.Contains(r.Stderr, "1 failing replayed: web-1") {
		t.Fatalf("status with web-1 refusing its declaration (exit %d, want 5 naming it):\n%s", r.Code, r.Combined())
	}
	// Declared again, it comes under a version past the host's, and is applied.
	if r := declare("three", "--wait", "30s"); r.Code != 0 {
		t.Fatalf("declare three again (%d): %s", r.Code, r.Combined())
	}
	fileSays("three")

	// Lost again, the host running this time: it reports v3 on its first sync, and
	// the next declaration comes after it.
	stop()
	restore(backup, filepath.Join(t.TempDir(), "cp"))
	cp.Serve()
	harness.Eventually(t, 20*time.Second, "web-1 reports v3 to the restored control plane", func() bool {
		n, ok := cp.Node("web-1")
		return ok && n.Applied != nil && *n.Applied == 3
	})
	if r := declare("four", "--wait", "30s"); r.Code != 0 {
		t.Fatalf("declare four (%d): %s", r.Code, r.Combined())
	}
	fileSays("four")
	if r := cp.Ctl("status"); r.Code != 0 {
		t.Fatalf("status after declaring again (exit %d, want 0):\n%s", r.Code, r.Combined())
	}
}
