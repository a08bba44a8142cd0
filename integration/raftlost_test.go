package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"mesh/controlplane/datadir"
	"mesh/integration/harness"
)

// TestServeRefusesALostRaftStore, with the built meshctl: a bootstrapped or joined
// control node whose Raft store holds no state (raft/ removed; raft.db removed,
// emptied or made afresh, with no snapshot) made serve wait its whole ready timeout
// (a minute) logging "no known peers, aborting election", then exit 1 with "no
// leader within 1m0s. A leader needs 1 of the 0 voters", having made a fresh, empty
// raft.db. It now exits 7 at once, naming the directory or file, what to do and the
// section of docs/operations.md, and creates nothing; a bootstrapped node is also
// told when running bootstrap again is right (never for a joined one). A node that
// joined starts as before (its join left state in its store).
func TestServeRefusesALostRaftStore(t *testing.T) {
	t.Parallel()
	cp := harness.NewControlPlane(t, bin, "raftlost")
	cp.Serve()
	tok, cp2 := cp.ControlToken("cp-2")
	if r := cp2.Join(tok); r.Code != 0 {
		t.Fatalf("join: %s", r.Combined())
	}
	cp2.Serve()
	backups := map[string]string{}
	for name, node := range map[string]*harness.ControlPlane{"bootstrapped": cp, "joined": cp2} {
		node.Process().Signal(syscall.SIGTERM)
		if code := node.Process().Wait(20 * time.Second); code != 0 {
			t.Fatalf("%s: serve exited %d on SIGTERM", name, code)
		}
		backups[name] = filepath.Join(t.TempDir(), name)
		if out, err := exec.Command("cp", "-a", node.Dir, backups[name]).CombinedOutput(); err != nil {
			t.Fatalf("cp -a: %v %s", err, out)
		}
	}
	cases := []struct {
		name  string
		lose  func(t *testing.T, raft string)
		names string // under raft/
	}{
		{"raft/ removed", func(t *testing.T, raft string) { os.RemoveAll(raft) }, ""},
		{"raft.db removed, no snapshot", func(t *testing.T, raft string) {
			os.RemoveAll(filepath.Join(raft, "snapshots"))
			if err := os.Remove(filepath.Join(raft, "raft.db")); err != nil {
				t.Fatal(err)
			}
		}, "raft.db"},
		{"raft.db emptied, no snapshot", func(t *testing.T, raft string) {
			os.RemoveAll(filepath.Join(raft, "snapshots"))
			if err := os.Truncate(filepath.Join(raft, "raft.db"), 0); err != nil {
				t.Fatal(err)
			}
		}, "raft.db"},
		{"a fresh raft.db, no snapshot", func(t *testing.T, raft string) {
			os.RemoveAll(raft)
			if err := os.Mkdir(raft, 0o700); err != nil {
				t.Fatal(err)
			}
			bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(raft, "raft.db")})
			if err != nil {
				t.Fatal(err)
			}
			bolt.Close()
		}, ""},
	}
	for _, node := range []string{"bootstrapped", "joined"} {
		for _, c := range cases {
			dir := filepath.Join(t.TempDir(), "cp")
			if out, err := exec.Command("cp", "-a", backups[node], dir).CombinedOutput(); err != nil {
				t.Fatalf("cp -a: %v %s", err, out)
			}
			raft := filepath.Join(dir, datadir.RaftDir)
			c.lose(t, raft)
			before := listing(t, raft)
			start := time.Now()
			p := harness.Start(t, nil, bin.Meshctl, "serve", "--data", dir)
			code := p.Wait(30 * time.Second)
			took := time.Since(start)
			out := p.Output()
			if code == -1 {
				p.Kill()
				t.Errorf("%s, %s: serve did not stop within 30 s:\n%s", node, c.name, out)
				continue
			}
			named := filepath.Join(raft, c.names)
			if code != ctlExitDataDir || !strings.Contains(out, named+" ") || !strings.Contains(out, "Raft state is lost") ||
				!strings.Contains(out, `"A damaged Raft store"`) || took > 10*time.Second {
				t.Errorf("%s, %s: exit %d after %s, want %d at once naming %s and what to do:\n%s", node, c.name, code, took.Round(time.Millisecond), ctlExitDataDir, named, out)
			}
			// Both served: neither is told to run bootstrap again, and the
			// bootstrapped one is told not to (TestBootstrapResumesANodeThatNeverServed
			// has the advice to run it again).
			if strings.Contains(out, "meshctl bootstrap --data") {
				t.Errorf("%s, %s: a node that served is advised to run bootstrap again:\n%s", node, c.name, out)
			}
			if served := strings.Contains(out, "This node served"); served != (node == "bootstrapped") {
				t.Errorf("%s, %s: told that the node served: %v:\n%s", node, c.name, served, out)
			}
			if after := listing(t, raft); after != before {
				t.Errorf("%s, %s: serve changed %s: %s, was %s", node, c.name, raft, after, before)
			}
			if node != "bootstrapped" {
				continue
			}
			// bootstrap run again made a new one-voter cluster here, exit 0: a new,
			// empty mesh with the mesh's CA, every host and token forgotten. It
			// refuses now, its dry run too, naming the ways out, and creates nothing.
			for _, dry := range []bool{false, true} {
				args := []string{"bootstrap", "--mesh", cp.Mesh, "--listen", cp.Listen, "--raft-listen", cp.Raft, "--cluster-listen", cp.Cluster, "--data", dir}
				if dry {
					args = append(args, "--dry-run")
				}
				r := harness.Run(t, "", nil, bin.Meshctl, args...)
				if r.Code != ctlExitDataDir || !strings.Contains(r.Stderr, "served from") || !strings.Contains(r.Stderr, "meshctl control remove cp-1") ||
					!strings.Contains(r.Stderr, "Recovering from lost quorum") || strings.Contains(r.Stdout, "is bootstrapped") {
					t.Errorf("%s, %s: bootstrap (dry run %v) on the directory of a node that served: exit %d, want %d and the ways out:\n%s",
						node, c.name, dry, r.Code, ctlExitDataDir, r.Combined())
				}
				if after := listing(t, raft); after != before {
					t.Errorf("%s, %s: bootstrap (dry run %v) changed %s: %s, was %s", node, c.name, dry, raft, after, before)
				}
			}
		}
	}
	// Their own stores, untouched, serve again: the joined node's join left state
	// in it (the probe entry it applied, or the snapshot holding it).
	cp.Serve()
	cp2.Serve()
}

// TestBootstrapResumesANodeThatNeverServed: a bootstrapped node that never served
// (mesh.json records no "served") whose Raft store is lost is the one case that is
// no loss, a bootstrap stopped before its raft step: serve says to run bootstrap
// again, and bootstrap run again finishes it (it is not refused as a node that
// served), and the node serves. The built meshctl.
func TestBootstrapResumesANodeThatNeverServed(t *testing.T) {
	t.Parallel()
	cp := harness.NewControlPlane(t, bin, "neverserved")
	raft := filepath.Join(cp.Dir, datadir.RaftDir)
	if err := os.RemoveAll(raft); err != nil {
		t.Fatal(err)
	}
	if r := cp.Ctl("serve"); r.Code != ctlExitDataDir || !strings.Contains(r.Stderr, "meshctl bootstrap --data") || strings.Contains(r.Stderr, "This node served") {
		t.Fatalf("serve on a node that never served, raft/ lost: exit %d, want %d and the advice to run bootstrap again:\n%s", r.Code, ctlExitDataDir, r.Combined())
	}
	r := cp.Ctl("bootstrap", "--mesh", cp.Mesh, "--listen", cp.Listen, "--raft-listen", cp.Raft, "--cluster-listen", cp.Cluster)
	if r.Code != 0 || !strings.Contains(r.Stdout, "is bootstrapped") {
		t.Fatalf("bootstrap run again on a node that never served (exit %d):\n%s", r.Code, r.Combined())
	}
	cp.Serve()
}

// listing is the names under dir, one a line, or "(none)" when dir does not exist.
func listing(t *testing.T, dir string) string {
	t.Helper()
	var names []string
	err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		names = append(names, p)
		return nil
	})
	if os.IsNotExist(err) {
		return "(none)"
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(names, "\n")
}
