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
			if hint := strings.Contains(out, "meshctl bootstrap --data"); hint != (node == "bootstrapped") {
				t.Errorf("%s, %s: the advice about running bootstrap again is given: %v:\n%s", node, c.name, hint, out)
			}
			if after := listing(t, raft); after != before {
				t.Errorf("%s, %s: serve changed %s: %s, was %s", node, c.name, raft, after, before)
			}
		}
	}
	// Their own stores, untouched, serve again: the joined node's join left state
	// in it (the probe entry it applied, or the snapshot holding it).
	cp.Serve()
	cp2.Serve()
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
