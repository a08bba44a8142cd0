package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/controlplane/datadir"
	"mesh/integration/harness"
)

// TestDisasterDamagedRaftStore: a control node's Raft store after a power loss on a
// disk that garbled or lost what it held, or a hand that truncated a file. serve
// crashed with a Go panic trace as its only message (bbolt's page assertions on
// a raft.db cut short; raft's "log not found" when the newest snapshot was torn and
// the log did not continue the older one), which the unit restarted up to its
// start limit, or started with no complaint from a raft.db emptied next to its
// snapshots, without its log and its vote. Each is now refused with exit 7 (the
// unit does not restart it), naming the file and the two ways out; the backup
// taken while the node was stopped serves as before, its host converged.
func TestDisasterDamagedRaftStore(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "disraft")
	cp.Serve()
	h := harness.NewHost(t, bin, "web-1")
	if r := h.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	h.Run()
	body := filepath.Join(t.TempDir(), "b.json")
	var last uint64
	// More entries than the snapshot threshold (8 here): snapshots are taken and
	// the log compacted behind them.
	for i := range 12 {
		writeFile(t, body, `{"files":[{"path":"app.conf","content":"`+strings.Repeat("v", i+1)+`"}]}`)
		if r := cp.Ctl("declare", "--node", "web-1", "--file", body); r.Code != 0 {
			t.Fatalf("declare: %s", r.Combined())
		}
	}
	n, _ := cp.Node("web-1")
	last = n.Declared
	cp.WaitConverged("web-1", last, 30*time.Second)
	raftDir := filepath.Join(cp.Dir, datadir.RaftDir)
	harness.Eventually(t, 20*time.Second, "a snapshot taken", func() bool {
		m, _ := filepath.Glob(filepath.Join(raftDir, "snapshots", "*", "state.bin"))
		return len(m) >= 1
	})
	cp.Process().Signal(syscall.SIGTERM)
	if code := cp.Process().Wait(20 * time.Second); code != 0 {
		t.Fatalf("serve exited %d on SIGTERM", code)
	}
	backup := filepath.Join(t.TempDir(), "backup")
	if out, err := exec.Command("cp", "-a", cp.Dir, backup).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v %s", err, out)
	}

	newestSnapshot := func(dir string) string {
		m, _ := filepath.Glob(filepath.Join(dir, datadir.RaftDir, "snapshots", "*", "state.bin"))
		// Named term-index-msec: with one term here, the longest and then greatest
		// name is the newest.
		sort.Slice(m, func(i, j int) bool {
			if len(m[i]) != len(m[j]) {
				return len(m[i]) > len(m[j])
			}
			return m[i] > m[j]
		})
		return m[0]
	}
	cases := []struct {
		name   string
		damage func(dir string) string // returns the file the refusal must name
	}{
		{"raft.db cut after its two meta pages", func(dir string) string {
			// What it holds beyond them (the free list, the log) is gone; a cut
			// anywhere may fall on pages bbolt has not used yet, and lose nothing.
			p := filepath.Join(dir, datadir.RaftDir, "raft.db")
			if err := os.Truncate(p, 2*4096); err != nil {
				t.Fatal(err)
			}
			return p
		}},
		{"raft.db emptied", func(dir string) string {
			p := filepath.Join(dir, datadir.RaftDir, "raft.db")
			if err := os.Truncate(p, 0); err != nil {
				t.Fatal(err)
			}
			return p
		}},
		{"the newest snapshot torn", func(dir string) string {
			p := newestSnapshot(dir)
			if err := os.Truncate(p, 100); err != nil {
				t.Fatal(err)
			}
			return p
		}},
	}
	for _, c := range cases {
		dir := filepath.Join(t.TempDir(), "cp")
		if out, err := exec.Command("cp", "-a", backup, dir).CombinedOutput(); err != nil {
			t.Fatalf("cp -a: %v %s", err, out)
		}
		file := c.damage(dir)
		p := harness.Start(t, nil, bin.Meshctl, "serve", "--data", dir)
		code := p.Wait(30 * time.Second)
		out := p.Output()
		if code == -1 {
			p.Signal(syscall.SIGQUIT) // its goroutines, to see where it waits
			p.Wait(10 * time.Second)
			out = p.Output()
			t.Fatalf("%s: serve started on a damaged Raft store:\n%s", c.name, out)
		}
		if code != 7 || !strings.Contains(out, file) || !strings.Contains(out, "Raft store is damaged") ||
			!strings.Contains(out, "backup") || !strings.Contains(out, "meshctl join") {
			t.Fatalf("%s: exit %d, want 7 naming %s and the ways out:\n%s", c.name, code, file, out)
		}
		if strings.Contains(out, "panic") || strings.Contains(out, "goroutine ") {
			t.Fatalf("%s: serve crashed:\n%s", c.name, out)
		}
	}

	// The backup, restored as operations.md says, serves; its host is converged.
	dir := filepath.Join(t.TempDir(), "cp")
	if out, err := exec.Command("cp", "-a", backup, dir).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v %s", err, out)
	}
	cp.Dir = dir
	cp.Serve()
	cp.WaitConverged("web-1", last, 30*time.Second)
	if n, _ := cp.Node("web-1"); n.Declared != last {
		t.Fatalf("the restored node declares v%d for web-1, want v%d", n.Declared, last)
	}
}
