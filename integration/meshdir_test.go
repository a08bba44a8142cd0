package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/integration/harness"
)

// TestADeclarationCannotReachAnotherAgentsStateDirectory: an agent whose managed root
// holds another agent's state directory (a root given as /srv, another agent's state
// in /srv/...) wrote there what its mesh declared: the other's identity.json, the
// keys it trusts. It is refused, apply_failed naming why, the other agent's files
// untouched and running; the root's other paths are written as ever.
func TestADeclarationCannotReachAnotherAgentsStateDirectory(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "meshdir")
	cp.Serve()
	inner, outer := harness.NewHost(t, bin, "web-1"), harness.NewHost(t, bin, "web-2")
	inner.Root = filepath.Join(t.TempDir(), "managed") // apart from web-2's root
	outer.Root = filepath.Dir(inner.State)             // holds web-1's state directory
	for _, h := range []*harness.Host{inner, outer} {
		if r := h.Enrol(cp.Token(h.Name)); r.Code != 0 {
			t.Fatalf("enrol %s: %s", h.Name, r.Combined())
		}
	}
	identity := filepath.Join(inner.State, "identity.json")
	before, err := os.ReadFile(identity)
	if err != nil {
		t.Fatal(err)
	}
	innerRun := inner.Run()
	innerRun.WaitOutput(t, "agent running", 30*time.Second)
	outer.Run()
	body := filepath.Join(t.TempDir(), "b.json")
	writeFile(t, body, `{"files":[{"path":"`+filepath.Base(inner.State)+`/identity.json","content":"{}"}]}`)
	if r := cp.Ctl("declare", "--node", "web-2", "--file", body); r.Code != 0 {
		t.Fatalf("declare: %s", r.Combined())
	}
	var msg string
	harness.Eventually(t, 30*time.Second, "web-2 reports the declaration refused", func() bool {
		n, _ := cp.Node("web-2")
		if n.LastError == nil || n.LastError.Code != "apply_failed" || n.LastError.Version != 1 {
			return false
		}
		msg = n.LastError.Message
		return true
	})
	if !strings.Contains(msg, "directory of the mesh's own programs") {
		t.Errorf("web-2's refusal says %q, want why", msg)
	}
	if after, err := os.ReadFile(identity); err != nil || string(after) != string(before) {
		t.Fatalf("web-1's identity.json changed (%v): %q", err, after)
	}
	if innerRun.Exited() {
		t.Fatalf("web-1's agent stopped:\n%s", innerRun.Output())
	}
	writeFile(t, body, `{"files":[{"path":"app/app.conf","content":"fine\n"}]}`)
	if r := cp.Ctl("declare", "--node", "web-2", "--file", body); r.Code != 0 {
		t.Fatalf("declare: %s", r.Combined())
	}
	cp.WaitConverged("web-2", 2, 30*time.Second)
}
