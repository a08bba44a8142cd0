package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestRunRefusesARootThatIsNoDirectory: meshhost run with a --root that is a file,
// a device or a FIFO exits 5 at once, and one whose parent does not exist 1 (a
// file system mounted later at boot: the unit restarts it), naming what is wrong, before anything is written or the agent says it is running. Before, it
// ran, reported ready, and failed every apply from the first declaration on; a
// mistyped root was made, parents and all, and the declared files written there.
func TestRunRefusesARootThatIsNoDirectory(t *testing.T) {
	state, _ := enrolled(t)
	base := t.TempDir()
	os.Chmod(base, 0o755)
	file := filepath.Join(base, "afile")
	os.WriteFile(file, []byte("x"), 0o644)
	fifo := filepath.Join(base, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	typo := filepath.Join(base, "nonexistent", "x")
	for root, want := range map[string]struct {
		code int
		says string
	}{
		file:        {exitIdentity, "is not a directory: it is a regular file"},
		"/dev/zero": {exitIdentity, "is not a directory: it is a character device"},
		fifo:        {exitIdentity, "is not a directory: it is a named pipe (FIFO)"},
		typo:        {exitFailure, "does not exist: create it or fix the path"},
	} {
		code, _, stderr := runCLI("", nil, "run", "--state", state, "--root", root)
		if code != want.code || !strings.Contains(stderr, want.says) {
			t.Errorf("--root %s: exit %d, %q; want %d and %q", root, code, stderr, want.code, want.says)
		}
	}
	if _, err := os.Lstat(filepath.Join(base, "nonexistent")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the mistyped root's parent was made: %v", err)
	}
	// A state directory not enrolled is said first: --state ./h1 --root ./h1/managed
	// before enrol made ./h1 is not a mistake in --root.
	unenrolled := filepath.Join(base, "h1")
	code, _, stderr := runCLI("", nil, "run", "--state", unenrolled, "--root", filepath.Join(unenrolled, "managed"))
	if code != exitIdentity || !strings.Contains(stderr, "has not enrolled") {
		t.Errorf("before enrol: exit %d, %q; want not enrolled", code, stderr)
	}
}
