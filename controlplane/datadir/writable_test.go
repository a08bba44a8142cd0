package datadir

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"mesh/host/dirlock"
	"mesh/host/fstest"
)

// TestWriteFailed: a write into the data directory refused by its place (a
// read-only file system, a parent this user may not write, a full disk) is said in
// the data directory's words and matches dirlock.ErrNotWritable, which meshctl
// refuses as an unusable data directory (exit 7); the raw "mkdir X: read-only file
// system" and "write X/raft/raft.db: no space left on device" were exit 1. Any
// other error is left as it is.
func TestWriteFailed(t *testing.T) {
	d := Dir("/srv/mesh/cp")
	for _, c := range []struct {
		errno syscall.Errno
		says  string
		full  bool
	}{
		{syscall.EROFS, "is on a read-only file system", false},
		{syscall.EACCES, "cannot be made by this user", false},
		{syscall.EPERM, "cannot be made by this user", false},
		{syscall.ENOSPC, "initialise the mesh state: the disk under the data directory /srv/mesh/cp is full", true},
	} {
		raw := &fs.PathError{Op: "mkdir", Path: string(d), Err: c.errno}
		err := d.WriteFailed("initialise the mesh state", raw)
		if !errors.Is(err, dirlock.ErrNotWritable) || !errors.Is(err, c.errno) || errors.Is(err, ErrDiskFull) != c.full || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%v: %v, want dirlock.ErrNotWritable saying %q", c.errno, err, c.says)
		}
		if c.full && !strings.Contains(err.Error(), "free space under /srv/mesh/cp") {
			t.Errorf("%v: %v, want where to free space", c.errno, err)
		}
	}
	other := errors.New("something else")
	if err := d.WriteFailed("x", other); err != other {
		t.Errorf("another error: %v, want it as it was", err)
	}
	if err := d.WriteFailed("x", nil); err != nil {
		t.Errorf("no error: %v", err)
	}
}

// TestMakeOnAReadOnlyFileSystem: Make of a data directory on a read-only file
// system (a bind mount made read-only, as root) says so. Make of a new one creates it.
func TestMakeOnAReadOnlyFileSystem(t *testing.T) {
	made := Dir(filepath.Join(t.TempDir(), "new", "cp"))
	if err := made.Make(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(string(made)); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("Make: %v, %v; want a directory of mode 0700", fi, err)
	}
	ro := fstest.Small(t, fstest.Options{ReadOnly: true, Mode: 0o700})
	d := Dir(filepath.Join(ro, "new"))
	err := d.Make()
	if !errors.Is(err, dirlock.ErrNotWritable) || !strings.Contains(err.Error(), "data directory "+string(d)+" is on a read-only file system") {
		t.Fatalf("Make on a read-only file system: %v, want it said", err)
	}
}

// TestLockOnAFullDisk: a lock whose holder's record finds no room is said once as
// what it is (dirlock.ErrNotWritable, exit 7), not wrapped in a second telling of
// the same full disk (a review).
func TestLockOnAFullDisk(t *testing.T) {
	mnt := fstest.Small(t, fstest.Options{Mode: 0o700})
	d := Dir(filepath.Join(mnt, "cp"))
	if err := d.Make(); err != nil {
		t.Fatal(err)
	}
	fstest.Fill(t, filepath.Join(mnt, "filler"))
	l, err := d.Lock("test")
	if err == nil {
		l.Release()
		t.Skip("the lock found room on the full file system")
	}
	if !errors.Is(err, dirlock.ErrNotWritable) || strings.Count(err.Error(), "free space") != 1 || strings.Contains(err.Error(), "is full (") {
		t.Fatalf("Lock on a full disk: %v, want it said once", err)
	}
}
