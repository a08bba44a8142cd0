package statedir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"mesh/host/dirlock"
	"mesh/host/fstest"
)

// TestPrepareRootRefusesWhatIsNoDirectory: a managed root that is a file, a
// device, a FIFO, a link to one or to nothing, or that lies under a file, is
// refused as what it is as the agent starts (ErrRootUnusable), and a missing one
// is made only when its parent exists: a mistyped --root /nonexistent/x used to
// become /nonexistent/x/etc/app.conf, and a file as the root failed only at the
// first apply, after the agent had reported itself running.
func TestPrepareRootRefusesWhatIsNoDirectory(t *testing.T) {
	base := t.TempDir()
	os.Chmod(base, 0o755)
	file := filepath.Join(base, "afile")
	os.WriteFile(file, []byte("x"), 0o644)
	fifo := filepath.Join(base, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	link := func(name, target string) string {
		p := filepath.Join(base, name)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct{ root, want string }{
		{file, file + " is not a directory: it is a regular file"},
		// (A missing parent: TestPrepareRootWithoutItsParent.)
		{"/dev/zero", "/dev/zero is not a directory: it is a character device"},
		{fifo, fifo + " is not a directory: it is a named pipe (FIFO)"},
		{link("tofile", file), "is not a directory: it is a symbolic link to a regular file"},
		{link("tozero", "/dev/zero"), "is not a directory: it is a symbolic link to a character device"},
		{link("dangling", filepath.Join(base, "gone")), "is a symbolic link to " + filepath.Join(base, "gone") + ", where nothing is"},
		{filepath.Join(file, "root"), file + ", on its path, is a regular file, not a directory"},
		{filepath.Join(file, "a", "root"), file + ", on its path, is a regular file, not a directory"},
	} {
		if _, err := os.Lstat(c.root); errors.Is(err, syscall.EACCES) {
			continue
		}
		err := PrepareRoot(c.root)
		var re *RootError
		if !errors.Is(err, ErrRootUnusable) || !errors.As(err, &re) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--root %s: %v; want ErrRootUnusable saying %q", c.root, err, c.want)
		}
		if strings.Contains(err.Error(), "chmod") || strings.Contains(err.Error(), "mode") {
			t.Errorf("--root %s: %q advises on modes", c.root, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(base, "nonexistent")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing parent was made: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(base, "gone")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a dangling link's target was made: %v", err)
	}

	// A directory, a link to one, and a missing root whose parent exists pass; the
	// last is made, 0755 under the usual umask, and nothing else.
	dir := filepath.Join(base, "dir")
	os.Mkdir(dir, 0o755)
	made := filepath.Join(dir, "managed")
	for _, root := range []string{dir, link("todir", dir), made, made + "/"} {
		if err := PrepareRoot(root); err != nil {
			t.Errorf("--root %s: %v", root, err)
		}
	}
	if fi, err := os.Lstat(made); err != nil || !fi.IsDir() {
		t.Fatalf("the missing root was not made: %v", err)
	}
	if entries, _ := os.ReadDir(made); len(entries) != 0 {
		t.Errorf("the root made holds %d entries", len(entries))
	}
}

// TestPrepareRootOnAReadOnlyFileSystem: a root that must be made where nothing may
// be written is refused as not writable (dirlock.ErrNotWritable, exit 5), saying
// why, not found at the first apply.
func TestPrepareRootOnAReadOnlyFileSystem(t *testing.T) {
	mnt := fstest.Small(t, fstest.Options{ReadOnly: true})
	err := PrepareRoot(filepath.Join(mnt, "managed"))
	if !errors.Is(err, dirlock.ErrNotWritable) || !strings.Contains(err.Error(), "managed root") || !strings.Contains(err.Error(), "read-only file system") {
		t.Fatalf("%v, want dirlock.ErrNotWritable for a read-only file system", err)
	}
}

// TestPrepareRootWithoutItsParent: a missing root whose parent is missing too is not
// made (a mistyped --root /nonexistent/x used to become /nonexistent/x/etc/app.conf),
// and is ErrRootParentMissing, not ErrRootUnusable: the parent may be a file system
// mounted later at boot, so meshhost exits with a code its unit restarts, and the
// message says how to order the unit after the mount (a review: exit 5 left the
// agent down for good after a boot-order race).
func TestPrepareRootWithoutItsParent(t *testing.T) {
	base := t.TempDir()
	os.Chmod(base, 0o755)
	for _, root := range []string{filepath.Join(base, "nonexistent", "x"), filepath.Join(base, "nonexistent", "x", "y")} {
		err := PrepareRoot(root)
		var re *RootError
		if !errors.Is(err, ErrRootParentMissing) || errors.Is(err, ErrRootUnusable) || !errors.As(err, &re) ||
			!strings.Contains(err.Error(), "does not exist: create it or fix the path") || !strings.Contains(err.Error(), "RequiresMountsFor="+filepath.Dir(root)) {
			t.Errorf("--root %s: %v; want ErrRootParentMissing naming its parent and the unit's ordering", root, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(base, "nonexistent")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the missing root's parent was made: %v", err)
	}
}

// TestARelativeRootsMissingParentIsSaidAbsolute: --root ./nope/managed, its parent
// missing, suggests RequiresMountsFor= with the parent's absolute path. It said
// RequiresMountsFor=nope, a relative path systemd rejects.
func TestARelativeRootsMissingParentIsSaidAbsolute(t *testing.T) {
	base := t.TempDir()
	t.Chdir(base)
	err := PrepareRoot("./nope/managed")
	var re *RootError
	if !errors.As(err, &re) || !errors.Is(err, ErrRootParentMissing) {
		t.Fatalf("%v; want a *RootError for the missing parent", err)
	}
	want := filepath.Join(base, "nope")
	if re.Missing != want || !strings.Contains(err.Error(), "RequiresMountsFor="+want+")") {
		t.Errorf("Missing %q, %v; want RequiresMountsFor=%s", re.Missing, err, want)
	}
}
