package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// smallFS mounts a tmpfs of 64 KiB at a new directory, with opts ("ro" or ""), and
// fills it when full is set; it skips where that cannot be done (not root).
func smallFS(t *testing.T, opts string, full bool) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	mnt := t.TempDir()
	o := "size=64k,mode=0755"
	if opts != "" {
		o += "," + opts
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", o, "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v: %s)", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })
	if full {
		f, err := os.Create(filepath.Join(mnt, "fill"))
		if err != nil {
			t.Fatal(err)
		}
		block := make([]byte, 4096)
		for {
			if _, err := f.Write(block); err != nil {
				break
			}
		}
		f.Close()
	}
	return mnt
}

// TestEnrolIntoAStateDirectoryThatCannotBeMade: a state directory that must be made
// on a read-only file system, on a full one, or under a file is refused as the
// state directory in the way it is (exit 5, with what to do), and nothing is left
// behind: before, a raw "mkdir …: read-only file system" or "write …/lock: no space
// left on device" exited 1, and the full disk kept an empty directory holding a
// lock file.
func TestEnrolIntoAStateDirectoryThatCannotBeMade(t *testing.T) {
	tok, _ := realToken(t)
	file := filepath.Join(t.TempDir(), "afile")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Run("under a file", func(t *testing.T) {
		for _, state := range []string{filepath.Join(file, "h1"), filepath.Join(file, "h1", "deeper")} {
			code, _, stderr := runCLI(tok, nil, "enrol", "--state", state)
			if code != exitIdentity || !strings.Contains(stderr, file+", on its path, is a regular file, not a directory") {
				t.Errorf("--state %s: exit %d, %q; want %d and the file on its path named", state, code, stderr, exitIdentity)
			}
		}
	})
	t.Run("read-only", func(t *testing.T) {
		state := filepath.Join(smallFS(t, "ro", false), "h8", "sub")
		code, _, stderr := runCLI(tok, nil, "enrol", "--state", state)
		if code != exitIdentity || !strings.Contains(stderr, "is on a read-only file system") || !strings.Contains(stderr, "mount it read-write") {
			t.Errorf("exit %d, %q; want %d and a read-only file system", code, stderr, exitIdentity)
		}
	})
	t.Run("full", func(t *testing.T) {
		mnt := smallFS(t, "", true)
		state := filepath.Join(mnt, "h8", "sub")
		code, _, stderr := runCLI(tok, nil, "enrol", "--state", state)
		if code != exitIdentity || !strings.Contains(stderr, "its file system is full") || !strings.Contains(stderr, "free space there") {
			t.Errorf("exit %d, %q; want %d and a full file system", code, stderr, exitIdentity)
		}
		if _, err := os.Lstat(filepath.Join(mnt, "h8")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the directories the enrolment made are left behind (%v)", err)
		}
	})
}
