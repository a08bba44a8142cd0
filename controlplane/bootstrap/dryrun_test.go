package bootstrap

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mesh/host/dirlock"
	"mesh/host/fstest"
)

// TestDryRunRunsTheChecks: `bootstrap --dry-run` runs the checks of its plan, which
// change nothing, and fails where the real run would: a broker port in use, an
// address not on this machine, a data directory on a read-only file system. It
// skipped them, said yes, and the real run then failed at step 1 or 2. Nothing is
// created either way, and a dry run that passes says ok for each check.
func TestDryRunRunsTheChecks(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	o, out := options(t, dir)
	o.DryRun = true
	if err := Run(o); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"  1. check     ok", "  2. check     ok", "  3. check     ok", "dry run: nothing was changed"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("a dry run that passes does not say %q:\n%s", want, out)
		}
	}
	assertNotCreated(t, dir)

	busy, err := net.Listen("tcp", o.Listen)
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	o, out = options(t, dir)
	o.Listen, o.DryRun = busy.Addr().String(), true
	err = Run(o)
	if err == nil || !strings.Contains(err.Error(), "step 2 (check): cannot listen on "+o.Listen) || !strings.Contains(out.String(), "  2. check     FAILED") {
		t.Errorf("a dry run with the broker port in use: %v, want step 2 failed:\n%s", err, out)
	}
	assertNotCreated(t, dir)

	// 192.0.2.1 (TEST-NET-1) is on no machine.
	o, out = options(t, dir)
	o.Listen, o.DryRun = "192.0.2.1:7300", true
	o.RaftListen, o.ClusterListen = "192.0.2.1:7301", "192.0.2.1:7302"
	if err := Run(o); err == nil || !strings.Contains(err.Error(), "cannot listen on 192.0.2.1:7300") || !strings.Contains(err.Error(), "dry run: nothing was changed") {
		t.Errorf("a dry run with an address not on this machine: %v, want step 2 failed:\n%s", err, out)
	}
	assertNotCreated(t, dir)

	ro := fstest.Small(t, fstest.Options{ReadOnly: true, Mode: 0o700})
	o, out = options(t, filepath.Join(ro, "new", "cp"))
	o.DryRun = true
	err = Run(o)
	if !errors.Is(err, dirlock.ErrNotWritable) || !strings.Contains(err.Error(), "step 1 (check)") || !strings.Contains(err.Error(), "read-only file system") {
		t.Errorf("a dry run on a read-only file system: %v, want step 1 failed, not writable:\n%s", err, out)
	}
	o.DryRun = false
	if err := Run(o); !errors.Is(err, dirlock.ErrNotWritable) {
		t.Errorf("the real run on a read-only file system: %v, want the same refusal", err)
	}
}

// TestBootstrapOnAFullDiskLeavesNothing: a bootstrap whose lock finds no room (a full
// disk) says so (exit 7) and takes away the directory it made and the empty lock
// file in it, as it does when a check fails; both were left (a review).
func TestBootstrapOnAFullDiskLeavesNothing(t *testing.T) {
	mnt := fstest.Small(t, fstest.Options{Full: true, Mode: 0o700})
	dir := filepath.Join(mnt, "cp")
	o, out := options(t, dir)
	err := Run(o)
	if !errors.Is(err, dirlock.ErrNotWritable) {
		t.Fatalf("bootstrap on a full disk: %v, want it said as such:\n%s", err, out)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		entries, _ := os.ReadDir(dir)
		t.Errorf("the refused bootstrap left %s behind (%v), holding %d entries", dir, err, len(entries))
	}
}
