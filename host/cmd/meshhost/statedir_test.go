//go:build unix

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/host/identity"
)

// TestStateDirectoryOthersControl: enrol and run refuse a state directory another
// user owns or group or others may write, exit 5 (a person must act: the unit does
// not restart the agent) and say how to fix it; run and status refuse an identity
// file that is a link. The normal case is every other test here.
func TestStateDirectoryOthersControl(t *testing.T) {
	t.Run("enrol, group-writable", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o775); err != nil {
			t.Fatal(err)
		}
		code, _, stderr := runCLI("mesh1_whatever", nil, "enrol", "--state", dir)
		if code != exitIdentity || !strings.Contains(stderr, "chmod 700 "+dir) || !strings.Contains(stderr, "group or others may write it") {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Fatalf("enrol wrote into it: %v", entries)
		}
	})
	t.Run("run, group-writable", func(t *testing.T) {
		dir, _ := enrolled(t)
		if err := os.Chmod(dir, 0o770); err != nil {
			t.Fatal(err)
		}
		code, _, stderr := refusedAtOnce(t, "run", "--state", dir, "--root", filepath.Join(dir, "managed"))
		if code != exitIdentity || !strings.Contains(stderr, "chmod 700 "+dir) {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if _, err := os.Lstat(filepath.Join(dir, "lock")); err == nil {
			t.Fatal("run opened its lock file in the directory it refused")
		}
	})
	t.Run("run, another user's", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("giving the directory to another user (chown to 65534) needs root")
		}
		dir, _ := enrolled(t)
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		code, _, stderr := refusedAtOnce(t, "run", "--state", dir, "--root", filepath.Join(dir, "managed"))
		if code != exitIdentity || !strings.Contains(stderr, "uid 65534") || !strings.Contains(stderr, "chown 0 "+dir) {
			t.Fatalf("exit %d: %s", code, stderr)
		}
	})
	t.Run("a symlinked identity", func(t *testing.T) {
		dir, _ := enrolled(t)
		theirs, _ := enrolled(t)
		if err := os.Remove(identity.Path(dir)); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(identity.Path(theirs), identity.Path(dir)); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{{"run", "--state", dir, "--root", filepath.Join(dir, "managed")}, {"status", "--state", dir}} {
			code, out, stderr := refusedAtOnce(t, args...)
			if code != exitIdentity || !strings.Contains(stderr, "is a symbolic link") || strings.Contains(out, "web-1") {
				t.Fatalf("%s: exit %d: %s%s", args[0], code, out, stderr)
			}
		}
	})
	t.Run("a symlinked revocation record", func(t *testing.T) {
		dir, _ := enrolled(t)
		if err := os.Symlink("/dev/zero", revokedPath(dir)); err != nil {
			t.Fatal(err)
		}
		code, _, stderr := runCLI("", nil, "status", "--state", dir)
		if code != exitIdentity || !strings.Contains(stderr, "is a symbolic link") {
			t.Fatalf("exit %d: %s", code, stderr)
		}
	})
}

// refusedAtOnce runs the command, which must end by itself within seconds: an agent
// that accepted its state directory would go on trying to reach its mesh.
func refusedAtOnce(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	type result struct {
		code        int
		out, stderr string
	}
	done := make(chan result, 1)
	go func() {
		code, out, stderr := runCLI("", nil, args...)
		done <- result{code, out, stderr}
	}()
	select {
	case r := <-done:
		return r.code, r.out, r.stderr
	case <-time.After(10 * time.Second):
		t.Fatalf("meshhost %s did not refuse: still running after 10s", strings.Join(args, " "))
		return 0, "", ""
	}
}

// TestReadOnlyStateDirectory: `meshhost run` on a state directory mounted read-only
// is refused as the state directory being in the way (exit 5, which the unit does
// not restart), saying so, not as a failure (exit 1) of opening a lock.
func TestReadOnlyStateDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to remount the state directory read-only")
	}
	dir, _ := enrolled(t)
	if out, err := exec.Command("mount", "--bind", dir, dir).CombinedOutput(); err != nil {
		t.Skipf("cannot bind-mount here (%v: %s)", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	if out, err := exec.Command("mount", "-o", "remount,ro,bind", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot remount read-only here (%v: %s)", err, out)
	}
	code, _, stderr := refusedAtOnce(t, "run", "--state", dir, "--root", filepath.Join(t.TempDir(), "managed"))
	if code != exitIdentity || !strings.Contains(stderr, "read-only file system") || !strings.Contains(stderr, "mount it read-write") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
}
