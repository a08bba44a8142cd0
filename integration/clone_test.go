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
// Past the grace (--shared-key-grace, short here) the node is failing key_shared:
// `status` exits 5 naming it and what to do, the metrics count it, and each agent,
// told in the answer to its status reports, logs that another machine holds its key,
// from where, and `meshhost status` says so on both machines (a second operations
// audit: status said "1 converged" and exited 0, and neither host said anything).
func TestACloneOfAnEnrolledMachineIsShown(t *testing.T) {
	t.Parallel() // mostly waits: see TestMain
	cp := harness.NewControlPlane(t, bin, "clone")
	const grace = 3 * time.Second
	cp.Serve("--shared-key-grace", grace.String())
	web := harness.NewHost(t, bin, "web-1")
	if r := web.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: exit %d:\n%s", r.Code, r.Combined())
	}
	web.Run()
	harness.Eventually(t, 15*time.Second, "web-1 alive", func() bool {
		n, ok := cp.Node("web-1")
		return ok && n.State == "alive"
	})
	harness.Eventually(t, 15*time.Second, "web-1 converged", func() bool { return cp.Ctl("status").Code == 0 })
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
		return strings.Contains(r.Stdout, "more than one connection with one node's key, on 1 node(s): web-1 (2, for ")
	})
	if n, _ := cp.Node("web-1"); n.Connections != 2 {
		t.Errorf("nodes --json: web-1 connections %d, want 2", n.Connections)
	}
	harness.Eventually(t, 5*time.Second, "the leader logs it", func() bool {
		return strings.Contains(cp.Process().Output(), "a node holds two connections with its key at once")
	})

	// Past the grace: not converged, exit 5, named with what to do.
	var r harness.Result
	harness.Eventually(t, 15*time.Second, "status exits 5 past the grace", func() bool {
		r = cp.Ctl("status")
		return r.Code == 5
	})
	for _, want := range []string{"not converged: 1 live node(s): 1 failing key_shared (two machines hold one node's key: revoke the node, then enrol each machine again with a token of its own): web-1 (held by 2 connections for "} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("status's verdict lacks %q:\n%s", want, r.Stderr)
		}
	}
	if !strings.Contains(r.Stdout, "0 converged, 0 behind, 1 failing") {
		t.Errorf("status's summary does not count web-1 failing:\n%s", r.Stdout)
	}
	if n, _ := cp.Node("web-1"); n.Converged || n.LastError == nil || n.LastError.Code != "key_shared" || n.SharedSince.IsZero() ||
		!strings.Contains(n.LastError.Message, "from 127.0.0.1:") {
		t.Errorf("nodes --json: web-1 converged %v, last error %+v, shared since %v", n.Converged, n.LastError, n.SharedSince)
	}
	// Named, the node's error is printed whole under the table, which cuts it to
	// 60 bytes (nodes and status alike); --json is as it was.
	for _, cmd := range []string{"nodes", "status"} {
		r := cp.Ctl(cmd, "web-1")
		if !strings.Contains(r.Stdout, "\nweb-1: last error v") || !strings.Contains(r.Stdout, " key_shared: held by 2 connections") ||
			!strings.Contains(r.Stdout, "secrets included; revoke the node and enrol each machine again") {
			t.Errorf("meshctl %s web-1 does not print the error whole:\n%s", cmd, r.Stdout)
		}
		if j := cp.Ctl(cmd, "--json", "web-1"); strings.Contains(j.Stdout, "last error v") {
			t.Errorf("meshctl %s --json web-1 holds the text lines:\n%s", cmd, j.Stdout)
		}
	}
	fams := cp.Scrape()
	if got := harness.Sum(fams, "mesh_nodes", "state=alive_not_converged"); got != 1 {
		t.Errorf("mesh_nodes{state=alive_not_converged} = %v, want 1", got)
	}
	if got := harness.Sum(fams, "mesh_nodes", "state=failing"); got != 1 {
		t.Errorf("mesh_nodes{state=failing} = %v, want 1", got)
	}

	// Both agents are told, and say it: in their log, and in meshhost status.
	for _, h := range []*harness.Host{web, clone} {
		harness.Eventually(t, 15*time.Second, h.Name+" logs that another machine holds its key", func() bool {
			out := h.Process().Output()
			return strings.Contains(out, "another machine holds this node's key") && strings.Contains(out, "from=127.0.0.1")
		})
		st := harness.Run(t, "", nil, bin.Meshhost, "status", "--state", h.State)
		if st.Code != 0 || !strings.Contains(st.Stdout, "shared    ANOTHER MACHINE holds this node's key (from 127.0.0.1;") {
			t.Errorf("%s: meshhost status (exit %d):\n%s%s", h.Name, st.Code, st.Stdout, st.Stderr)
		}
	}
}
