//go:build unix

package dirlock

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"mesh/host/fstest"
)

// TestAFullOrMisplacedDirectoryIsNotWritable: a lock record that cannot be written
// for a full file system, and a directory that is a file or behind one, are
// refused as ErrNotWritable, each said for what it is, not as "record this process
// in …: no space left on device" or "open the lock of …: not a directory", which
// both callers exited 1 on.
func TestAFullOrMisplacedDirectoryIsNotWritable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "afile")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{file, filepath.Join(file, "sub")} {
		_, err := Acquire("state directory", d, "meshhost enrol")
		if !errors.Is(err, ErrNotWritable) || !errors.Is(err, syscall.ENOTDIR) || !strings.Contains(err.Error(), "is a file, not a directory") {
			t.Errorf("%s: %v, want ErrNotWritable for ENOTDIR", d, err)
		}
	}
	t.Run("full", func(t *testing.T) {
		mnt := fstest.Small(t, fstest.Options{Full: true})
		_, err := Acquire("state directory", mnt, "meshhost enrol")
		if !errors.Is(err, ErrNotWritable) || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "its file system is full") {
			t.Fatalf("a full file system: %v, want ErrNotWritable for ENOSPC", err)
		}
	})
}
