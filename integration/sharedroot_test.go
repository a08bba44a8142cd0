package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/integration/harness"
)

// TestASecondAgentOnARootIsRefused: two agents given one managed root (of two meshes,
// or two nodes of one: a second agent started by hand beside the packaged one) each
// put back the other's files at every check, for good, running their hooks each
// time, while both meshes showed the node converged (a review). The second is
// refused at start, exit 8, as a state directory in use is, and so is one whose
// root lies inside the first's, or holds it (one started on a directory above a
// running agent's root ran, a docs walkthrough).
func TestASecondAgentOnARootIsRefused(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "sharedroot")
	cp.Serve()
	h1, h2 := harness.NewHost(t, bin, "web-1"), harness.NewHost(t, bin, "web-2")
	for _, h := range []*harness.Host{h1, h2} {
		if r := h.Enrol(cp.Token(h.Name)); r.Code != 0 {
			t.Fatalf("enrol %s: %s", h.Name, r.Combined())
		}
	}
	first := h1.Run()
	first.WaitOutput(t, "agent running", 30*time.Second)
	inside := filepath.Join(h1.Root, "etc")
	if err := os.MkdirAll(inside, 0o755); err != nil {
		t.Fatal(err)
	}
	// A root not made yet inside the first's is refused before it is made: a
	// refused run left it in the other agent's tree (a docs walkthrough).
	unmade := filepath.Join(inside, "new")
	// A root holding the first's: the first's state directory, which holds its root
	// (and not the second's state directory, which would be a usage error).
	holding := filepath.Dir(h1.Root)
	realRoot, err := filepath.EvalSymlinks(h1.Root)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ root, says string }{
		{h1.Root, "in use by another running agent"}, {inside, "is inside " + h1.Root}, {unmade, "is inside " + h1.Root},
		{holding, "managed root " + holding + " holds " + realRoot + ", the managed root of a running agent (pid "},
	} {
		second := harness.Start(t, nil, bin.Meshhost, "run", "--state", h2.State, "--root", c.root, "--heartbeat", "1s")
		if code := second.Wait(20 * time.Second); code != 8 || !strings.Contains(second.Output(), c.says) {
			t.Errorf("a second agent on %s: exit %d, want 8 saying %q:\n%s", c.root, code, c.says, second.Output())
		}
	}
	if _, err := os.Lstat(unmade); !os.IsNotExist(err) {
		t.Errorf("the refused run made its root %s inside the running agent's: %v", unmade, err)
	}
	if first.Exited() {
		t.Fatalf("the first agent exited:\n%s", first.Output())
	}
	// Its own root: it runs.
	own := h2.Run()
	own.WaitOutput(t, "agent running", 30*time.Second)
}
