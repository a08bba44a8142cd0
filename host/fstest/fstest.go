// Package fstest mounts small file systems for the tests of what a read-only or a
// full disk does to a command: a tmpfs of 64 KiB (or the size asked), read-only or
// filled to its last byte. Mounting needs root; without it, or where the kernel
// refuses, the test is skipped, saying why. Each mount is taken down when its test
// ends.
package fstest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Options says what file system Small mounts.
type Options struct {
	// ReadOnly mounts it read-only.
	ReadOnly bool
	// Full fills it, with one file named "fill", until a write fails.
	Full bool
	// Mode is its root directory's mode; 0 means 0755.
	Mode os.FileMode
	// Size is its size in mount's syntax (64k, 16m); "" means 64k.
	Size string
	// CoveredBy says, when the test is skipped, what covers the same without a
	// mount (added to the reason).
	CoveredBy string
}

// Small mounts a tmpfs of 64 KiB (o.Size) at a new directory and returns its path.
func Small(t testing.TB, o Options) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "fs")
	SmallAt(t, dir, o)
	return dir
}

// SmallAt mounts a tmpfs of 64 KiB (o.Size) at dir, made if missing.
func SmallAt(t testing.TB, dir string, o Options) {
	t.Helper()
	covered := ""
	if o.CoveredBy != "" {
		covered = "; " + o.CoveredBy
	}
	if os.Geteuid() != 0 {
		t.Skip("mounting a small file system needs root" + covered)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	mode := o.Mode
	if mode == 0 {
		mode = 0o755
	}
	size := o.Size
	if size == "" {
		size = "64k"
	}
	opts := fmt.Sprintf("size=%s,mode=%04o", size, mode.Perm())
	if o.ReadOnly {
		opts += ",ro"
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", opts, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v: %s)%s", err, out, covered)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	if o.Full {
		Fill(t, filepath.Join(dir, "fill"))
	}
}

// Fill writes path until its file system has no room left.
func Fill(t testing.TB, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	block := make([]byte, 4096)
	for {
		if _, err := f.Write(block); err != nil {
			return
		}
	}
}
