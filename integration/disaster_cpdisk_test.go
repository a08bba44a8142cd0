package integration

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/controlplane/datadir"
	"mesh/integration/harness"
)

// TestDisasterControlDiskStaysFull: the disk under a single control node's data
// directory fills while declarations are made, and stays full for a while. The
// node cannot append the entry an election starts with, so it stops leading and
// every command exits 3; `meshctl control status` (which needs no leader) said
// "Start the voters that do not answer ()", naming none, and each snapshot Raft
// tried left a term-index-msec.tmp directory on the full disk for good. Now
// control status names the node that cannot write its Raft log and says to free
// space (and mesh_raft_log_write_failing is 1), no unfinished snapshot stays behind, and once there is room the node
// leads again by itself: the next declaration is committed and applied, and a
// restart finds it.
func TestDisasterControlDiskStaysFull(t *testing.T) {
	mnt := filepath.Join(t.TempDir(), "fs")
	mountSmallFS(t, mnt, "16m", "TestFailedSnapshotsLeaveNothing and TestReportControlStatus cover the parts without one")

	cp := harness.NewControlPlaneIn(t, bin, "discpfull", filepath.Join(mnt, "cp"))
	serve := cp.Serve()
	h := harness.NewHost(t, bin, "web-1")
	if r := h.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	h.Run()
	body := filepath.Join(t.TempDir(), "b.json")
	writeFile(t, body, `{"files":[{"path":"a","content":"before"}]}`)
	if r := cp.Ctl("declare", "--node", "web-1", "--file", body); r.Code != 0 {
		t.Fatalf("declare: %s", r.Combined())
	}
	cp.WaitConverged("web-1", 1, 20*time.Second)

	filler := filepath.Join(mnt, "filler")
	fillDisk(t, filler)
	// Entries the log's free pages take, then one they do not.
	writeFile(t, body, `{"files":[{"path":"a","content":"`+strings.Repeat("x", 40000)+`"}]}`)
	full := false
	for range 40 {
		r := cp.Ctl("declare", "--node", "web-1", "--file", body)
		if r.Code == 4 && strings.Contains(r.Stderr, "disk is full") {
			full = true
			break
		}
		if r.Code != 0 {
			t.Fatalf("declare while the disk fills: exit %d:\n%s", r.Code, r.Combined())
		}
	}
	if !full {
		t.Fatal("forty declarations on a full disk, and none refused as disk_full")
	}

	snapshots := filepath.Join(cp.Dir, datadir.RaftDir, "snapshots")
	unfinished := func() []string {
		m, _ := filepath.Glob(filepath.Join(snapshots, "*.tmp"))
		return m
	}
	var status harness.Result
	harness.Eventually(t, 20*time.Second, "control status names the node that cannot write its Raft log", func() bool {
		status = cp.Ctl("control", "status")
		return strings.Contains(status.Stdout, "cp-1 cannot write its Raft log") && strings.Contains(status.Stdout, "free space")
	})
	if strings.Contains(status.Stdout, "do not answer ()") {
		t.Fatalf("control status tells to start no voter:\n%s", status.Combined())
	}
	if v := harness.Sum(cp.Scrape(), "mesh_raft_log_write_failing"); v != 1 {
		t.Fatalf("mesh_raft_log_write_failing = %v on the full disk, want 1", v)
	}
	// Several snapshot intervals (1s here) on the full disk.
	for range 8 {
		if u := unfinished(); len(u) > 1 {
			t.Fatalf("unfinished snapshots pile up on the full disk: %v", u)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if serve.Exited() {
		t.Fatalf("serve exited on a full disk:\n%s", serve.Output())
	}
	t.Logf("snapshots that failed on the full disk: %d", strings.Count(serve.Output(), "failed to take snapshot"))

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	writeFile(t, body, `{"files":[{"path":"a","content":"after"}]}`)
	var declared harness.Result
	harness.Eventually(t, 30*time.Second, "a declaration committed once there is room", func() bool {
		declared = cp.Ctl("declare", "--node", "web-1", "--file", body)
		return declared.Code == 0
	})
	n, _ := cp.Node("web-1")
	cp.WaitConverged("web-1", n.Declared, 30*time.Second)
	if got, _ := h.ReadManaged("a"); got != "after" {
		t.Fatalf("the host's file is %q, want the declaration made once there was room", got)
	}
	if r := cp.Ctl("control", "status"); r.Code != 0 || strings.Contains(r.Stdout, "cannot write its Raft log") {
		t.Fatalf("control status once there is room (exit %d):\n%s", r.Code, r.Combined())
	}
	if v := harness.Sum(cp.Scrape(), "mesh_raft_log_write_failing"); v != 0 {
		t.Fatalf("mesh_raft_log_write_failing = %v once there is room, want 0", v)
	}

	serve.Signal(syscall.SIGTERM)
	if code := serve.Wait(20 * time.Second); code != 0 {
		t.Fatalf("serve exited %d on SIGTERM:\n%s", code, serve.Output())
	}
	cp.Serve()
	if u := unfinished(); len(u) != 0 {
		t.Fatalf("unfinished snapshots left after a restart: %v", u)
	}
	if again, _ := cp.Node("web-1"); again.Declared != n.Declared {
		t.Fatalf("after the restart web-1 is declared v%d, want v%d", again.Declared, n.Declared)
	}
}
