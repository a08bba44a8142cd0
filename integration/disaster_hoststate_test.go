package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/host/state"
	"mesh/integration/harness"
)

// TestDisasterHostStateDiskFull: the disk under a host's state directory fills up
// (the managed root is elsewhere), and a declaration comes whose record does not
// fit the applied state's slots, so its file must be made anew. The agent reports
// that it could not save its state, and the control plane shows it; killed and
// started again meanwhile, the agent never applies an older declaration than the
// one its state holds, never leaves a torn state file, and once there is room it
// saves the state and reports the declaration applied, with no new declaration.
func TestDisasterHostStateDiskFull(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "dishstate")
	cp.Serve()
	h := harness.NewHost(t, bin, "web-1")
	// The filler beside the state directory: enrol refuses one holding other files.
	filler := mountTinyFS(t, h.State+".fs", 8)
	h.State = filepath.Join(h.State+".fs", "state")
	h.Root = filepath.Join(t.TempDir(), "managed")
	if r := h.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	agent := h.Run()
	body := filepath.Join(t.TempDir(), "b.json")
	writeFile(t, body, `{"files":[{"path":"one","content":"v1"}]}`)
	if r := cp.Ctl("declare", "--node", "web-1", "--file", body); r.Code != 0 {
		t.Fatalf("declare: %s", r.Combined())
	}
	cp.WaitConverged("web-1", 1, 30*time.Second)

	fillDisk(t, filepath.Join(filepath.Dir(h.State), "filler2"))
	// A record several times the slot the first one was given.
	var files []string
	for i := range 80 {
		files = append(files, fmt.Sprintf(`{"path":"dir/%s-%03d","content":"v2"}`, strings.Repeat("long-name-", 6), i))
	}
	writeFile(t, body, `{"files":[`+strings.Join(files, ",")+`]}`)
	if r := cp.Ctl("declare", "--node", "web-1", "--file", body); r.Code != 0 {
		t.Fatalf("declare: %s", r.Combined())
	}
	var seen string
	harness.Eventually(t, 30*time.Second, "web-1 reports its state not saved", func() bool {
		n, _ := cp.Node("web-1")
		if n.LastError == nil {
			return false
		}
		seen = n.LastError.Code + ": " + n.LastError.Message
		return n.LastError.Code == "state_not_saved"
	})
	t.Logf("web-1 reports %s", seen)
	if a, err := state.Load(h.State); err != nil || a.Version != 1 {
		t.Fatalf("the state on the full disk: v%d, %v; want v1 whole", a.Version, err)
	}

	// Killed and started again while the disk is full.
	agent.Kill()
	checkNoTornFiles(t, h.State, "after SIGKILL on a full disk")
	agent = h.Run()
	time.Sleep(3 * time.Second)
	checkNoTornFiles(t, h.State, "restarted on a full disk")
	if seq := appliedSequence(t, agent.Output()); len(seq) > 0 && seq[0] < 2 {
		t.Fatalf("restarted on a full disk, the agent applied %v: older than v2", seq)
	}

	if err := os.Remove(filepath.Join(filepath.Dir(h.State), "filler2")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	cp.WaitConverged("web-1", 2, 60*time.Second)
	if a, err := state.Load(h.State); err != nil || a.Version != 2 {
		t.Fatalf("the state once there is room: v%d, %v; want v2", a.Version, err)
	}
	harness.Eventually(t, 30*time.Second, "web-1 reports no error", func() bool {
		n, _ := cp.Node("web-1")
		return n.LastError == nil && n.Declared == 2
	})
	if _, err := os.Stat(filepath.Join(h.Root, "one")); !os.IsNotExist(err) {
		t.Fatalf("the file v2 no longer declares is still there (%v)", err)
	}
}
