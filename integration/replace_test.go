package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/datadir"
	"mesh/integration/harness"
)

// TestBootstrapMachineReplaced: the bootstrap machine is lost for good, with the CA
// key backed up as docs/operations.md says. The operator removes it, restores the
// backup on a surviving control node, which `meshctl nodes` then shows as the CA
// holder, mints a control token there and brings up a new machine under the lost
// one's name; the mesh is three voters again, and a host enrolled before converges
// through the new machine. The lost machine, back to life before that, is told it
// was removed and stops. The new machine starts from a snapshot that says cp-1
// was removed, which is about the machine it replaces, not about it.
func TestBootstrapMachineReplaced(t *testing.T) {
	t.Parallel() // mostly waits (grace periods, timeouts): see TestMain
	cp1 := harness.NewControlPlane(t, bin, "replace")
	cp1.Serve()
	backup := t.TempDir()
	for _, f := range []string{datadir.CAKeyFile, datadir.AccountKeyFile} {
		copyFile(t, filepath.Join(cp1.Dir, f), filepath.Join(backup, f), 0o600)
	}
	cp2 := joinControl(t, cp1, "cp-2")
	cp3 := joinControl(t, cp1, "cp-3")
	web := harness.NewHost(t, bin, "web-1")
	if r := web.Enrol(cp1.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	web.Run()

	cp1.Process().Kill()
	// A second copy of the lost machine (its disk, say, put back in service later),
	// which comes back only once a new machine serves under its name.
	lateCopy := filepath.Join(t.TempDir(), "cp-1-copy")
	if out, err := exec.Command("cp", "-a", cp1.Dir, lateCopy).CombinedOutput(); err != nil {
		t.Fatalf("copy the lost machine's data directory: %v\n%s", err, out)
	}
	var removal harness.Result
	harness.Eventually(t, 20*time.Second, "cp-1 removed", func() bool {
		removal = cp2.Ctl("control", "remove", "cp-1")
		return removal.Code == 0
	})
	if !strings.Contains(removal.Stdout, "cp-1 held the mesh CA key") || !strings.Contains(removal.Stdout, "restored from their backup") {
		t.Errorf("removing the CA holder does not say that no control token can be minted until its keys are restored:\n%s", removal.Stdout)
	}
	caHolders := func() []string {
		var out []string
		for _, c := range cp3.Nodes().Control {
			if c.CAHolder {
				out = append(out, c.ID)
			}
		}
		return out
	}
	if h := caHolders(); len(h) != 0 {
		t.Fatalf("with the bootstrap machine removed, nodes marks %v as holding the CA key", h)
	}
	if r := cp3.Ctl("token", "--role", "control", "--node", "cp-9", "--addr", "127.0.0.1:1"); r.Code != 4 || !strings.Contains(r.Stderr, "restore them here from their backup") {
		t.Fatalf("minting with no CA key anywhere (exit %d): %s", r.Code, r.Combined())
	}
	// Enough entries after the removal for a snapshot to cover it: the new machine
	// then starts from a snapshot that says cp-1 was removed, and catches up on its
	// own admission from the log.
	body := filepath.Join(t.TempDir(), "b.json")
	for i := range 10 {
		writeFile(t, body, fmt.Sprintf(`{"files":[{"path":"state","content":"before the replacement %d"}]}`, i))
		if r := cp2.Ctl("declare", "--node", "web-1", "--file", body); r.Code != 0 {
			t.Fatalf("declare: %s", r.Combined())
		}
	}
	time.Sleep(1500 * time.Millisecond) // the harness snapshots every second past 8 entries
	// The lost machine comes back to life, its log from before the removal: the
	// other control nodes tell it it was removed, and it stops for good (exit 6,
	// which its systemd unit does not restart) instead of waiting for a leader that
	// no longer talks to it.
	start := time.Now()
	back := harness.Run(t, "", nil, bin.Meshctl, "serve", "--data", cp1.Dir, "--raft-heartbeat", "300ms")
	if back.Code != ctlExitRemoved || !strings.Contains(back.Stderr, "the other control nodes list cp-1 as removed") {
		t.Fatalf("the removed machine back: exit %d, want %d:\n%s", back.Code, ctlExitRemoved, back.Combined())
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the removed machine took %s to stop", took)
	}
	// The backup restored on cp-2, as the operations guide says: nothing else to do.
	for _, f := range []string{datadir.CAKeyFile, datadir.AccountKeyFile} {
		copyFile(t, filepath.Join(backup, f), filepath.Join(cp2.Dir, f), 0o600)
	}
	harness.Eventually(t, 10*time.Second, "nodes marks cp-2 as the CA holder", func() bool {
		return slices.Equal(caHolders(), []string{"cp-2"})
	})
	tok, repl := cp2.ControlToken("cp-1")
	if r := repl.Join(tok); r.Code != 0 {
		t.Fatalf("join the replacement cp-1 (exit %d):\n%s", r.Code, r.Combined())
	}
	// Not heard from yet, the replacement is not taken for the bootstrap machine
	// whose id it has: the keys are on cp-2.
	if h := caHolders(); !slices.Equal(h, []string{"cp-2"}) {
		t.Errorf("the replacement joined, not serving yet: nodes marks %v as holding the CA key, want [cp-2]", h)
	}
	if cfg, err := datadir.Dir(repl.Dir).LoadConfig(); err != nil || cfg.CAHolder == "cp-1" {
		t.Errorf("the replacement's mesh.json names itself as the CA holder (%v)", err)
	}
	repl.Serve()
	harness.Eventually(t, 30*time.Second, "three voters alive: cp-1 (new), cp-2, cp-3", func() bool {
		voters := 0
		for _, c := range cp3.Nodes().Control {
			if (c.Raft == api.RaftVoter || c.Raft == api.RaftLeader) && c.State == api.StateAlive {
				voters++
			}
		}
		return voters == 3
	})
	writeFile(t, body, `{"files":[{"path":"state","content":"after the replacement"}]}`)
	if r := repl.Ctl("declare", "--node", "web-1", "--file", body); r.Code != 0 {
		t.Fatalf("declare through the replacement: %s", r.Combined())
	}
	repl.WaitConverged("web-1", 11, 30*time.Second)
	if h := caHolders(); !slices.Equal(h, []string{"cp-2"}) {
		t.Fatalf("after the replacement nodes marks %v as holding the CA key, want cp-2", h)
	}
	// The copy of the lost machine back now: the id it asks about is the new
	// machine's, active. It used to wait for a leader that refused it, exit 1 after
	// a minute, and be restarted by its unit for ever; it learns from the curve key
	// that cp-1 is another machine now, and stops for good.
	start = time.Now()
	late := harness.Run(t, "", nil, bin.Meshctl, "serve", "--data", lateCopy, "--raft-heartbeat", "300ms")
	if late.Code != ctlExitRemoved || !strings.Contains(late.Stderr, "another machine joined under its name") {
		t.Fatalf("the lost machine's copy back after its replacement: exit %d, want %d:\n%s", late.Code, ctlExitRemoved, late.Combined())
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the lost machine's copy took %s to stop", took)
	}
	if _, err := os.Stat(filepath.Join(lateCopy, datadir.RemovedFile)); err != nil {
		t.Errorf("the copy's data directory does not remember the removal: %v", err)
	}
	repl.WaitConverged("web-1", 11, 5*time.Second)
}

// TestALoneVoterRemovedThatComesBackStops: two control nodes are one voter and one
// nonvoter; the voter (the bootstrap machine) is lost, the survivor recovered alone
// from a peers file as "Losing the bootstrap machine" says, and the lost machine
// removed. Back on its old disk, it is the only voter of its configuration and leads
// at once: it served a control plane of its own, minting tokens, its control status
// exit 0 (a docs walkthrough), since only a node hearing no leader asked the others.
// A leader no member follows asks too, and it stops for good (exit 6).
func TestALoneVoterRemovedThatComesBackStops(t *testing.T) {
	t.Parallel()
	cp1 := harness.NewControlPlane(t, bin, "lonevoter")
	cp1.Serve()
	cp2 := joinControl(t, cp1, "cp-2")
	cp1.Process().Kill()
	cp2.Process().Signal(syscall.SIGTERM)
	if code := cp2.Process().Wait(30 * time.Second); code != 0 {
		t.Fatalf("stop cp-2: exit %d\n%s", code, cp2.Process().Output())
	}
	writeFile(t, filepath.Join(cp2.Dir, "raft", "peers.json"), `[{"id":"cp-2","address":"`+cp2.Raft+`","non_voter":false}]`)
	cp2.Serve()
	// The CA files restored on the survivor first: the removal names it as holding
	// them (it said no control token could be minted, a docs walkthrough).
	for _, f := range []string{datadir.CAKeyFile, datadir.AccountKeyFile} {
		copyFile(t, filepath.Join(cp1.Dir, f), filepath.Join(cp2.Dir, f), 0o600)
	}
	harness.Eventually(t, 20*time.Second, "nodes marks cp-2 as holding the CA key", func() bool {
		for _, c := range cp2.Nodes().Control {
			if c.ID == "cp-2" && c.CAHolder {
				return true
			}
		}
		return false
	})
	var removal harness.Result
	harness.Eventually(t, 30*time.Second, "cp-1 removed", func() bool {
		removal = cp2.Ctl("control", "remove", "cp-1")
		return removal.Code == 0
	})
	if !strings.Contains(removal.Stdout, "cp-2 hold(s) them too") || strings.Contains(removal.Stdout, "no control token can be minted") {
		t.Errorf("removing the CA holder, cp-2 holding the keys too:\n%s", removal.Stdout)
	}
	back := harness.Start(t, nil, bin.Meshctl, "serve", "--data", cp1.Dir, "--raft-heartbeat", "300ms")
	if code := back.Wait(30 * time.Second); code != ctlExitRemoved || !strings.Contains(back.Output(), "the other control nodes list this node as removed") {
		t.Fatalf("the removed lone voter back: exit %d, want %d:\n%s", code, ctlExitRemoved, back.Output())
	}
}

// TestTwoRemovedVotersThatComeBackTogetherStop: two voters of three lost, the
// survivor recovered alone (peers.json) and removed them; the two, back on their
// old disks, elect one of them in the configuration they kept, which the other
// follows, and led a control plane of their own (the last notes left it open: only
// a lone voter was caught). A leader some member does not follow asks the other
// brokers one by one; the survivor's says it was removed, and it stops, exit 6; its
// fellow, then without a leader, asks and stops too.
func TestTwoRemovedVotersThatComeBackTogetherStop(t *testing.T) {
	t.Parallel()
	cp1 := harness.NewControlPlane(t, bin, "twovoters")
	cp1.Serve()
	cp2 := joinControl(t, cp1, "cp-2")
	cp3 := joinControl(t, cp1, "cp-3")
	cp1.Process().Kill()
	cp2.Process().Kill()
	cp3.Process().Signal(syscall.SIGTERM)
	if code := cp3.Process().Wait(30 * time.Second); code != 0 {
		t.Fatalf("stop cp-3: exit %d\n%s", code, cp3.Process().Output())
	}
	writeFile(t, filepath.Join(cp3.Dir, "raft", "peers.json"), `[{"id":"cp-3","address":"`+cp3.Raft+`","non_voter":false}]`)
	cp3.Serve()
	for _, id := range []string{"cp-1", "cp-2"} {
		harness.Eventually(t, 30*time.Second, id+" removed", func() bool { return cp3.Ctl("control", "remove", id).Code == 0 })
	}
	back1 := harness.Start(t, nil, bin.Meshctl, "serve", "--data", cp1.Dir, "--raft-heartbeat", "300ms")
	back2 := harness.Start(t, nil, bin.Meshctl, "serve", "--data", cp2.Dir, "--raft-heartbeat", "300ms")
	for i, back := range []*harness.Process{back1, back2} {
		if code := back.Wait(60 * time.Second); code != ctlExitRemoved || !strings.Contains(back.Output(), "the other control nodes list this node as removed") {
			t.Errorf("removed voter cp-%d back beside the other: exit %d, want %d:\n%s", i+1, code, ctlExitRemoved, back.Output())
		}
	}
}
