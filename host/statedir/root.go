package statedir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"mesh/host/atomicfile"
	"mesh/host/dirlock"
	"mesh/host/readfile"
)

// ErrRootUnusable: the managed root (--root) is something other than a directory.
// See *RootError.
var ErrRootUnusable = errors.New("statedir: the managed root cannot be used")

// ErrRootParentMissing: the managed root does not exist, nor does its parent, which
// the agent does not make. Unlike ErrRootUnusable it may mend by itself (a file
// system mounted later at boot), so meshhost exits with a code its unit restarts.
// See *RootError.
var ErrRootParentMissing = errors.New("statedir: the managed root's parent does not exist")

// RootError is a managed root the agent refuses as it starts, rather than report
// itself running and fail at the first declaration. Exactly one of these holds:
// Mode is what is at Root (links followed) when it is not a directory, Link saying
// Root itself is a symbolic link; Target is where Root, a symbolic link, points
// when nothing is there; Part is a file on Root's path; Missing is Root's parent,
// which does not exist, as an absolute path. It matches ErrRootParentMissing when Missing is set, and
// ErrRootUnusable otherwise.
type RootError struct {
	Root    string
	Mode    fs.FileMode
	Link    bool
	Target  string
	Part    string
	Missing string
}

func (e *RootError) Error() string {
	switch {
	case e.Missing != "":
		return fmt.Sprintf("the parent of --root %s, %s, does not exist: create it or fix the path; if it is on a file system mounted later at boot, order the unit after it "+
			"(a drop-in with RequiresMountsFor=%s). meshhost run makes the managed root itself when it is missing as it starts, never the directories above it, "+
			"so that a mistyped path does not become a new tree of declared files; nothing was written", e.Root, e.Missing, e.Missing)
	case e.Target != "":
		return fmt.Sprintf("the managed root %s is a symbolic link to %s, where nothing is: make that directory, or point --root at one; nothing was written", e.Root, e.Target)
	case e.Part != "":
		return fmt.Sprintf("the managed root %s cannot be there: %s, on its path, is %s, not a directory; nothing was written. Give the path of a directory (ls -ld %s shows what is there)",
			e.Root, e.Part, readfile.Kind(e.Mode), e.Part)
	}
	what := readfile.Kind(e.Mode)
	if e.Link {
		what = "a symbolic link to " + what
	}
	return fmt.Sprintf("the managed root %s is not a directory: it is %s; nothing was written. --root names the directory the declared files are kept in, "+
		"not a file (ls -l %s shows what is there)", e.Root, what, e.Root)
}

// Is reports whether target is ErrRootParentMissing (a missing parent) or
// ErrRootUnusable (anything else).
func (e *RootError) Is(target error) bool {
	if e.Missing != "" {
		return target == ErrRootParentMissing
	}
	return target == ErrRootUnusable
}

// PrepareRoot makes sure the managed root at dir is a directory, as the agent
// starts (whether it may write there, an apply finds): something else there (a file, a device, a FIFO, a link
// to one, or to nothing) is a *RootError; a root that does not exist is made (mode
// 0755, as an apply makes it) only when its parent exists, and only once the path
// passes CheckRoot, else a *RootError naming the missing parent; one that cannot be
// made (read-only, full, not this user's to write) is a *dirlock.NotWritableError.
// A symbolic link to a directory is followed: a root elsewhere (/srv/mesh pointing
// to /data/mesh) is an operator's choice, and CheckRoot judges the link's owner
// and the way to its target.
func PrepareRoot(dir string) error {
	const what = "the managed root"
	lfi, err := os.Lstat(dir)
	switch {
	case err == nil:
		fi, err := os.Stat(dir)
		if errors.Is(err, fs.ErrNotExist) && lfi.Mode()&fs.ModeSymlink != 0 {
			target, _ := os.Readlink(dir)
			return &RootError{Root: dir, Target: target}
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", what, dir, err)
		}
		if !fi.IsDir() {
			return &RootError{Root: dir, Mode: fi.Mode(), Link: lfi.Mode()&fs.ModeSymlink != 0}
		}
		return nil
	case errors.Is(err, syscall.ENOTDIR):
		if part, mode, ok := FileOnPath(dir); ok {
			return &RootError{Root: dir, Part: part, Mode: mode}
		}
		return fmt.Errorf("%s %s: %w", what, dir, err)
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s %s: %w", what, dir, err)
	}
	parent := filepath.Dir(filepath.Clean(dir))
	if _, err := os.Stat(parent); errors.Is(err, fs.ErrNotExist) {
		// Said absolute: the message suggests RequiresMountsFor= with it, which
		// systemd refuses for a relative path (--root ./nope/managed said
		// RequiresMountsFor=nope).
		if abs, err := filepath.Abs(parent); err == nil {
			parent = abs
		}
		return &RootError{Root: dir, Missing: parent}
	}
	// Nothing is made where another user could change the way.
	if err := CheckRoot(what, dir); err != nil {
		return err
	}
	err = os.Mkdir(dir, 0o755)
	if err == nil {
		// Flushed into its parent: the files an apply writes durably in it are
		// lost with the root's own name otherwise.
		// A parent this user may write but not read cannot be opened to
		// flush: the root is made, as before the flush.
		if err = atomicfile.SyncDir(parent); errors.Is(err, fs.ErrPermission) {
			err = nil
		}
	}
	if err != nil && !errors.Is(err, fs.ErrExist) {
		if dirlock.NotWritable(err) {
			return &dirlock.NotWritableError{What: what, Dir: dir, Err: err}
		}
		return fmt.Errorf("making %s: %w", what, err)
	}
	// Made, or made by something else meanwhile: looked at again either way.
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, dir, err)
	}
	if !fi.IsDir() {
		return &RootError{Root: dir, Mode: fi.Mode()}
	}
	return nil
}
