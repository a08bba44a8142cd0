package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mesh/host/fstest"
)

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
		state := filepath.Join(fstest.Small(t, fstest.Options{ReadOnly: true}), "h8", "sub")
		code, _, stderr := runCLI(tok, nil, "enrol", "--state", state)
		if code != exitIdentity || !strings.Contains(stderr, "is on a read-only file system") || !strings.Contains(stderr, "mount it read-write") {
			t.Errorf("exit %d, %q; want %d and a read-only file system", code, stderr, exitIdentity)
		}
	})
	t.Run("full", func(t *testing.T) {
		mnt := fstest.Small(t, fstest.Options{Full: true})
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
