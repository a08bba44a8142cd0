package integration

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/integration/harness"
)

// TestACloneOfAnEnrolledMachineIsShown: a machine imaged after its enrolment (its
// state directory copied to a second machine) runs a second agent with the same
// node key. The control plane cannot tell the two apart (their reports overwrite
// each other), but it sees two connections with one key: `meshctl status` and
// `nodes --json` name the node, and the leader logs it. Before, nothing said so
// (an operations audit: a clone whose hook failed left `declare --wait` converged).
func TestACloneOfAnEnrolledMachineIsShown(t *testing.T) {
	t.Parallel() // mostly waits: see TestMain
	cp := harness.NewControlPlane(t, bin, "clone")
	cp.Serve()
	web := harness.NewHost(t, bin, "web-1")
	if r := web.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: exit %d:\n%s", r.Code, r.Combined())
	}
	web.Run()
	harness.Eventually(t, 15*time.Second, "web-1 alive", func() bool {
		n, ok := cp.Node("web-1")
		return ok && n.State == "alive"
	})
	if r := cp.Ctl("status"); strings.Contains(r.Stdout, "more than one connection") {
		t.Fatalf("one machine shown as sharing its key:\n%s", r.Stdout)
	}

	clone := harness.NewHost(t, bin, "web-1-clone")
	if out, err := exec.Command("cp", "-a", web.State, clone.State).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v: %s", err, out)
	}
	clone.Root = filepath.Join(clone.State, "managed")
	clone.Run()
	harness.Eventually(t, 15*time.Second, "status names the key held twice", func() bool {
		r := cp.Ctl("status")
		return strings.Contains(r.Stdout, "more than one connection with one node's key, on 1 node(s): web-1 (2)")
	})
	if n, _ := cp.Node("web-1"); n.Connections != 2 {
		t.Errorf("nodes --json: web-1 connections %d, want 2", n.Connections)
	}
	harness.Eventually(t, 5*time.Second, "the leader logs it", func() bool {
		return strings.Contains(cp.Process().Output(), "a node holds two connections with its key at once")
	})
}
