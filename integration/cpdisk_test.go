package integration

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/integration/harness"
)

// fillDisk writes a file at path until the file system it is on is full.
func fillDisk(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	for { // what is left, less than a chunk
		if _, err := f.Write(chunk[:4096]); err != nil {
			break
		}
	}
}

// TestControlNodeDiskFull: the disk under a control node's data directory fills up.
// A declaration the Raft log has no room for is refused as such (disk_full, exit 4,
// "nothing was committed", where to free space), not as an unreachable control
// plane; the node goes on answering reads and its host stays converged. Once there
// is room the same declaration is committed and applied, and a restart finds every
// committed change.
func TestControlNodeDiskFull(t *testing.T) {
	mnt := filepath.Join(t.TempDir(), "fs")
	mountSmallFS(t, mnt, "16m", "nothing else here checks how a control node answers one")

	cp := harness.NewControlPlaneIn(t, bin, "cpdisk", filepath.Join(mnt, "cp"))
	serve := cp.Serve()
	web := harness.NewHost(t, bin, "web-1")
	if r := web.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	web.Run()
	small := filepath.Join(t.TempDir(), "small.json")
	writeFile(t, small, `{"files":[{"path":"a","content":"before"}]}`)
	if r := cp.Ctl("declare", "--node", "web-1", "--file", small); r.Code != 0 {
		t.Fatalf("declare: %s", r.Combined())
	}
	cp.WaitConverged("web-1", 1, 20*time.Second)

	// An entry larger than what the log's file has free inside it.
	big := filepath.Join(t.TempDir(), "big.json")
	writeFile(t, big, `{"files":[{"path":"a","content":"`+strings.Repeat("x", 60000)+`"}]}`)
	filler := filepath.Join(mnt, "filler")
	fillDisk(t, filler)
	r := cp.Ctl("declare", "--node", "web-1", "--file", big)
	if r.Code != 4 || !strings.Contains(r.Stderr, "disk is full") || !strings.Contains(r.Stderr, "nothing was committed") ||
		!strings.Contains(r.Stderr, cp.Dir) {
		t.Fatalf("declare on a full disk: exit %d, want 4 and the disk named full:\n%s", r.Code, r.Combined())
	}
	if serve.Exited() {
		t.Fatalf("serve exited on a full disk:\n%s", serve.Output())
	}
	// Reads are answered, and nothing of the refused declaration shows.
	n, ok := cp.Node("web-1")
	if !ok || n.Declared != 1 || n.Applied == nil || *n.Applied != 1 {
		t.Fatalf("web-1 on a full disk: %+v (found %t), want v1 declared and applied", n, ok)
	}
	if got, _ := web.ReadManaged("a"); got != "before" {
		t.Fatalf("the host's file is %q on a full disk, want the v1 content", got)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 20*time.Second, "the declaration committed once there is room", func() bool {
		r = cp.Ctl("declare", "--node", "web-1", "--file", big)
		return r.Code == 0
	})
	cp.WaitConverged("web-1", 2, 20*time.Second)

	serve.Signal(syscall.SIGTERM)
	if code := serve.Wait(20 * time.Second); code != 0 {
		t.Fatalf("serve exited %d on SIGTERM:\n%s", code, serve.Output())
	}
	cp.Serve()
	if n, ok := cp.Node("web-1"); !ok || n.Declared != 2 {
		t.Fatalf("after the restart web-1 = %+v (found %t), want v2 declared", n, ok)
	}
	cp.WaitConverged("web-1", 2, 20*time.Second)
	if got, _ := web.ReadManaged("a"); got != strings.Repeat("x", 60000) {
		t.Fatalf("the host's file holds %d bytes, want the 60,000 of v2", len(got))
	}
}

// TestControlNodeWhoseDiskGoesReadOnly: a file system with errors=remount-ro (the
// usual setting of a root file system) turns read-only after a disk error. The next
// election's term could not be recorded, and hashicorp/raft panicked: exit 2 and a
// goroutine dump naming no file. The node now stops with exit 7 (not restarted by
// meshctl.service), saying what it could not record and where; once the file system
// is mended, it serves everything committed before.
func TestControlNodeWhoseDiskGoesReadOnly(t *testing.T) {
	dev, mnt := mountExt4(t, "32M")
	cp := harness.NewControlPlaneIn(t, bin, "cpro", filepath.Join(mnt, "cp"))
	serve := cp.Serve()
	token := cp.Token("web-1")
	if token == "" {
		t.Fatal("no token")
	}
	// The kernel's own way to an ext4 error: with errors=remount-ro the file
	// system is read-only from here on.
	if err := os.WriteFile("/sys/fs/ext4/"+filepath.Base(dev)+"/trigger_fs_error", []byte("1"), 0); err != nil {
		t.Skipf("cannot trigger an ext4 error on %s (%v); skipping the read-only case", dev, err)
	}
	body := filepath.Join(t.TempDir(), "a.json")
	writeFile(t, body, `{"files":[{"path":"a","content":"a"}]}`)
	cp.Ctl("token", "--node", "web-2") // a write: refused, one way or another
	if code := serve.Wait(60 * time.Second); code != ctlExitDataDir || !strings.Contains(serve.Output(), "cannot record its Raft term or vote") ||
		!strings.Contains(serve.Output(), "read-only file system") || strings.Contains(serve.Output(), "goroutine ") {
		t.Fatalf("serve on a file system turned read-only: exit %d, want %d naming what it could not record:\n%s", code, ctlExitDataDir, serve.Output())
	}
	remountMended(t, dev, mnt)
	cp.Serve()
	if r := cp.Ctl("token", "list", "--node", "web-1", "--json"); r.Code != 0 || !strings.Contains(r.Stdout, `"pending"`) {
		t.Fatalf("the token minted before, once mended (exit %d): %s", r.Code, r.Combined())
	}
}

// TestAnEnrolmentOnAFullDiskSaysSoAndNamesNoPath: an enrolment the control node's
// Raft log has no room for is refused as worth another try (exit 7), saying the
// control plane cannot record it and the token is not used, with nothing of the
// control node's own (its data directory, its store's error: the client has proved
// only a token); the control node's log names the disk and where to free space.
// Once there is room the same token enrols. Before (a review), the host was told
// "commit enrol: write …/raft/raft.db: no space left on device" and to try again in
// a few seconds.
func TestAnEnrolmentOnAFullDiskSaysSoAndNamesNoPath(t *testing.T) {
	mnt := filepath.Join(t.TempDir(), "fs")
	mountSmallFS(t, mnt, "16m", "nothing else here checks what an enrolling host is told of a full disk")

	cp := harness.NewControlPlaneIn(t, bin, "cpdiskenrol", filepath.Join(mnt, "cp"))
	// No snapshot meanwhile: each compacts the log and frees pages inside the
	// store, where the enrolments then fit; on a loaded machine (the whole suite)
	// enough of them came for 40 enrolments to fit without the disk.
	serve := cp.Serve("--raft-snapshot-interval", "1h", "--raft-snapshot-threshold", "1000000")
	const n = 40
	tokens := make([]string, n)
	for i := range tokens {
		tokens[i] = cp.Token(fmt.Sprintf("web-%d", i))
	}
	fillDisk(t, filepath.Join(mnt, "filler"))
	// Raft's store takes small entries in the pages it holds free inside its file
	// until they run out: enrol one host after another until one finds no room.
	refused := -1
	var r harness.Result
	for i := 0; i < n && refused < 0; i++ {
		r = harness.NewHost(t, bin, fmt.Sprintf("web-%d", i)).Enrol(tokens[i], "--timeout", "20s")
		if r.Code != 0 {
			refused = i
		}
	}
	if refused < 0 {
		t.Fatalf("%d enrolments on a full disk all went through: nothing here fills the Raft store", n)
	}
	t.Logf("enrolment %d refused:\n%s", refused, r.Stderr)
	if r.Code != 7 || !strings.Contains(r.Stderr, "cannot write its Raft log") || !strings.Contains(r.Stderr, "the token is not used") {
		t.Fatalf("enrolment %d on a full disk: exit %d, want 7 saying the control plane cannot record it and the token is not used:\n%s", refused, r.Code, r.Combined())
	}
	for _, private := range []string{mnt, "raft.db", "no space left"} {
		if strings.Contains(r.Combined(), private) {
			t.Errorf("the enrolling host was told %q of the control node:\n%s", private, r.Combined())
		}
	}
	if !strings.Contains(serve.Output(), "disk is full") || !strings.Contains(serve.Output(), cp.Dir) {
		t.Errorf("serve's log does not name the full disk and where to free space:\n%s", serve.Output())
	}

	if err := os.Remove(filepath.Join(mnt, "filler")); err != nil {
		t.Fatal(err)
	}
	host := harness.NewHost(t, bin, fmt.Sprintf("web-%d", refused))
	harness.Eventually(t, 30*time.Second, "the same token enrols once there is room", func() bool {
		r = host.Enrol(tokens[refused], "--timeout", "5s")
		return r.Code == 0
	})
}

// TestAControlNodeWhoseDiskHangs: the leader's disk stops answering (a stalled
// device, an NFS server gone; fsfreeze here), so its Raft log write does not return.
// An operator's change is answered within meshctl's --timeout, unavailable and
// maybe carried out, and reads are answered meanwhile, however many changes wait.
// Before (a review), hashicorp/raft's timeout bounded only the taking up of a
// change, each handler waited for good, reads and changes shared eight slots, and
// after two `meshctl token` runs `meshctl nodes` went unanswered. Once the disk
// answers, the node goes on.
func TestAControlNodeWhoseDiskHangs(t *testing.T) {
	_, mnt := mountExt4(t, "64M")
	cp := harness.NewControlPlaneIn(t, bin, "cpfrozen", filepath.Join(mnt, "cp"))
	serve := cp.Serve()
	if out, err := exec.Command("fsfreeze", "-f", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot freeze %s (%v: %s): nothing else here makes a disk hang", mnt, err, out)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			if out, err := exec.Command("fsfreeze", "-u", mnt).CombinedOutput(); err != nil {
				t.Errorf("fsfreeze -u %s: %v: %s", mnt, err, out)
			}
		}
	}
	defer thaw()

	// Four runs, each sent again at 2.5 and 7.5 s: twelve changes waiting by 8 s,
	// more than the eight slots reads shared with them.
	nodes := []string{"w-1", "w-2", "w-3", "w-4"}
	changes := make(chan harness.Result, len(nodes))
	for _, node := range nodes {
		go func() { changes <- cp.Ctl("token", "--node", node) }()
	}
	time.Sleep(8 * time.Second)
	start := time.Now()
	if r := cp.Ctl("nodes"); r.Code != 0 || time.Since(start) > 5*time.Second {
		t.Errorf("meshctl nodes while changes wait on a hung disk: exit %d after %s, want 0 at once:\n%s", r.Code, time.Since(start), r.Combined())
	}
	for range nodes {
		r := <-changes
		t.Logf("meshctl token on a hung disk: exit %d: %s", r.Code, strings.TrimSpace(r.Stderr))
		if r.Code != 3 || !strings.Contains(r.Stderr, "may still be carried out") && !strings.Contains(r.Stderr, "may have been carried out") {
			t.Errorf("meshctl token on a hung disk: exit %d, want 3 saying it may be carried out:\n%s", r.Code, r.Combined())
		}
	}
	// The hung log is said where operators look (it said all was well: a review),
	// and a change is refused at once, nothing done, not queued behind it.
	r := cp.Ctl("control", "status")
	t.Logf("control status on a hung disk: exit %d:\n%s", r.Code, r.Combined())
	if r.Code == 0 || !strings.Contains(r.Combined(), "Raft log") {
		t.Errorf("control status with the leader's log write hung: exit %d, want it named:\n%s", r.Code, r.Combined())
	}
	start = time.Now()
	r = cp.Ctl("label", "w-1", "a=b", "--timeout", "5s")
	t.Logf("a change on a hung disk: exit %d after %s: %s", r.Code, time.Since(start).Round(time.Millisecond), strings.TrimSpace(r.Stderr))
	thaw()
	harness.Eventually(t, 30*time.Second, "a change once the disk answers", func() bool {
		return cp.Ctl("token", "--node", "w-9").Code == 0
	})
	if serve.Exited() {
		t.Fatalf("serve exited:\n%s", serve.Output())
	}
}
