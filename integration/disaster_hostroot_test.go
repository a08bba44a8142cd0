package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/integration/harness"
)

// TestDisasterManagedRootFull: the file system under a host's managed root fills
// up. A declaration that needs more room is reported apply_failed, with the path
// and that the disk is full, and when the agent tries again, in `meshctl nodes` and
// `meshhost status`; the file it would replace stays whole with what the previous
// declaration put there. Once there is room again the agent applies the same
// declaration by itself: nothing is declared again.
func TestDisasterManagedRootFull(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "disroot")
	cp.Serve()
	h := harness.NewHost(t, bin, "web-1")
	if r := h.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	// Room for a few pages: the first declaration fits, the second does not.
	filler := mountTinyFS(t, h.Root, 4)
	h.Run()
	body := filepath.Join(t.TempDir(), "b.json")
	writeFile(t, body, `{"files":[{"path":"etc/app.conf","content":"small\n"}]}`)
	if r := cp.Ctl("declare", "--node", "web-1", "--file", body); r.Code != 0 {
		t.Fatalf("declare: %s", r.Combined())
	}
	cp.WaitConverged("web-1", 1, 30*time.Second)

	big := strings.Repeat("x", 48<<10)
	writeFile(t, body, `{"files":[{"path":"etc/app.conf","content":"`+big+`"}]}`)
	if r := cp.Ctl("declare", "--node", "web-1", "--file", body); r.Code != 0 {
		t.Fatalf("declare: %s", r.Combined())
	}
	var msg string
	harness.Eventually(t, 30*time.Second, "web-1 reports the declaration failed on a full disk", func() bool {
		n, _ := cp.Node("web-1")
		if n.LastError == nil || n.LastError.Code != "apply_failed" || n.LastError.Version != 2 || n.LastError.RetryAt.IsZero() {
			return false
		}
		msg = n.LastError.Message
		return true
	})
	if !strings.Contains(msg, "etc/app.conf") || !strings.Contains(msg, "no space left on device") && !strings.Contains(msg, "disk is full") {
		t.Fatalf("the failure does not name the file and the full disk: %q", msg)
	}
	t.Logf("web-1 reports: %s", msg)
	if r := cp.Ctl("nodes"); !strings.Contains(r.Stdout, "apply_failed") {
		t.Fatalf("meshctl nodes does not show the failure:\n%s", r.Combined())
	}
	if r := cp.Ctl("status"); r.Code != 5 || !strings.Contains(r.Combined(), "web-1") {
		t.Fatalf("status with web-1 failing: exit %d, want 5 naming it:\n%s", r.Code, r.Combined())
	}
	if r := harness.Run(t, "", nil, bin.Meshhost, "status", "--state", h.State); !strings.Contains(r.Stdout, "apply_failed") || !strings.Contains(r.Stdout, "retry") {
		t.Fatalf("meshhost status does not show the failure and the next attempt:\n%s", r.Combined())
	}
	if got, _ := h.ReadManaged("etc/app.conf"); got != "small\n" {
		t.Fatalf("on a full disk etc/app.conf holds %d bytes, want the v1 content whole", len(got))
	}
	entries, _ := os.ReadDir(filepath.Join(h.Root, "etc"))
	for _, e := range entries {
		if e.Name() != "app.conf" {
			t.Fatalf("the failed write left %s behind", e.Name())
		}
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	cp.WaitConverged("web-1", 2, 60*time.Second)
	if got, _ := h.ReadManaged("etc/app.conf"); got != big {
		t.Fatalf("etc/app.conf holds %d bytes after the retry, want %d", len(got), len(big))
	}
	if n, _ := cp.Node("web-1"); n.Declared != 2 || n.LastError != nil {
		t.Fatalf("after the retry web-1 = declared v%d, last error %+v; want v2 and none", n.Declared, n.LastError)
	}
}
