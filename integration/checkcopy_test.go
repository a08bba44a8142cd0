package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/controlplane/datadir"
	"mesh/integration/harness"
)

// TestCheckABackupCopy: `meshctl check` on a control node's data directory, with the
// built binaries, as operations.md's "Backing up" says. While serve runs on it, the
// directory is refused (exit 8: check a copy). The node stopped and its directory
// copied with `cp -a`, the copy passes (exit 0), naming the Raft index serve would
// start at, the one the node had applied, with the snapshot and the commands after
// it replayed; serve then starts on that copy, as check said it would. A copy whose
// raft.db is cut short fails (exit 7) naming the file, and serve refuses it alike.
// Before, nothing could check a copy: `bootstrap --dry-run` on it exited 0 without
// opening the Raft store.
func TestCheckABackupCopy(t *testing.T) {
	t.Parallel()
	cp := harness.NewControlPlane(t, bin, "chkcopy")
	cp.Serve()
	// Past the snapshot threshold (8 here), then two more after the snapshot: the
	// copy holds a snapshot and a log after it.
	for i := range 10 {
		cp.Token(fmt.Sprintf("web-%d", i))
	}
	raftDir := filepath.Join(cp.Dir, datadir.RaftDir)
	harness.Eventually(t, 20*time.Second, "a snapshot taken", func() bool {
		m, _ := filepath.Glob(filepath.Join(raftDir, "snapshots", "*", "state.bin"))
		return len(m) >= 1
	})
	cp.Token("web-10")
	cp.Token("web-11")

	if r := cp.Ctl("check"); r.Code != 8 || r.Stdout != "" || !strings.Contains(r.Stderr, "meshctl serve") || !strings.Contains(r.Stderr, "check a copy") {
		t.Fatalf("check of the directory serve runs on: exit %d, want 8 saying to check a copy:\n%s", r.Code, r.Combined())
	}
	var nodes struct {
		Control []struct {
			AppliedIndex uint64 `json:"applied_index"`
		} `json:"control"`
	}
	r := cp.Ctl("nodes", "--json")
	if err := json.Unmarshal([]byte(r.Stdout), &nodes); err != nil || len(nodes.Control) != 1 || nodes.Control[0].AppliedIndex == 0 {
		t.Fatalf("nodes --json: %v\n%s", err, r.Combined())
	}
	applied := nodes.Control[0].AppliedIndex

	cp.Process().Signal(syscall.SIGTERM)
	if code := cp.Process().Wait(20 * time.Second); code != 0 {
		t.Fatalf("serve exited %d on SIGTERM", code)
	}
	backup := filepath.Join(t.TempDir(), "backup")
	if out, err := exec.Command("cp", "-a", cp.Dir, backup).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v %s", err, out)
	}

	r = harness.Run(t, "", nil, bin.Meshctl, "check", "--data", backup, "--json")
	var rep struct {
		WouldStart bool `json:"would_start"`
		Exit       int  `json:"exit"`
		Raft       struct {
			LastIndex  uint64 `json:"last_index"`
			StateIndex uint64 `json:"state_index"`
			Commands   int    `json:"commands_after_snapshot"`
			Snapshot   *struct {
				Index uint64 `json:"index"`
			} `json:"snapshot"`
		} `json:"raft"`
		State struct {
			Initialised bool `json:"initialised"`
		} `json:"state"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil || r.Code != 0 || !rep.WouldStart || rep.Exit != 0 {
		t.Fatalf("check --json of the copy: exit %d, %v:\n%s", r.Code, err, r.Combined())
	}
	if rep.Raft.LastIndex < applied || rep.Raft.StateIndex != rep.Raft.LastIndex || rep.Raft.Snapshot == nil || rep.Raft.Commands < 2 || !rep.State.Initialised {
		t.Errorf("check --json of the copy: %+v (snapshot %v); want the last index at least %d, applied, a snapshot and the two tokens after it", rep, rep.Raft.Snapshot, applied)
	}
	r = harness.Run(t, "", nil, bin.Meshctl, "check", "--data", backup)
	if want := fmt.Sprintf("serve would start on this data directory, at Raft index %d", rep.Raft.LastIndex); r.Code != 0 || !strings.Contains(r.Stdout, want) || strings.Contains(r.Stdout, "FAILED") {
		t.Fatalf("check of the copy: exit %d, want 0 and %q:\n%s", r.Code, want, r.Combined())
	}

	// The copy serves, as check said (the original stopped: one of them at a time).
	damaged := filepath.Join(t.TempDir(), "damaged")
	if out, err := exec.Command("cp", "-a", backup, damaged).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v %s", err, out)
	}
	cp.Dir = backup
	cp.Serve()
	cp.Process().Signal(syscall.SIGTERM)
	if code := cp.Process().Wait(20 * time.Second); code != 0 {
		t.Fatalf("serve on the copy exited %d on SIGTERM", code)
	}

	// raft.db cut after its two meta pages: what a copy cut short leaves.
	db := filepath.Join(damaged, datadir.RaftDir, "raft.db")
	if err := os.Truncate(db, 2*4096); err != nil {
		t.Fatal(err)
	}
	r = harness.Run(t, "", nil, bin.Meshctl, "check", "--data", damaged)
	if r.Code != 7 || !strings.Contains(r.Stdout, "FAILED   raft store") || !strings.Contains(r.Stdout, db) || !strings.Contains(r.Stderr, "serve would not start") {
		t.Fatalf("check of a copy with raft.db cut short: exit %d, want 7 naming %s:\n%s", r.Code, db, r.Combined())
	}
	p := harness.Start(t, nil, bin.Meshctl, "serve", "--data", damaged)
	if code := p.Wait(30 * time.Second); code != 7 {
		p.Kill()
		t.Fatalf("serve on the copy check refused: exit %d, want 7 as check said:\n%s", code, p.Output())
	}
}
