// Package atomicfile writes files so that a reader, or a machine that loses
// power, sees either the old content or the new content, never a mixture and
// never an empty file.
//
// The host agent keeps its identity and its applied state in small files that
// it must not lose: a torn identity file would cut the machine off from the mesh
// that still believes it. Every write therefore goes to a temporary file in the
// same directory, is flushed to stable storage, and only then takes the final
// name; the directory is flushed afterwards so the new name itself survives a
// crash.
//
// Errors wrap the underlying *fs.PathError or *os.LinkError, and through them
// the system error number, so callers can test errors.Is(err, syscall.ENOSPC)
// and tell a person that the disk is full.
package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// hooks lets tests fail a write at a chosen step, and WriteFileOwned give the
// file an owner. A nil *hooks (the other exported functions' case) does nothing.
type hooks struct {
	// before is called just before the named step ("write", "sync", "chmod",
	// "chown", "close", "rename", "link", "syncdir") and aborts it with its error.
	before func(step string) error
	// owner is the user the file is given to before it takes its name, when
	// setOwner (WriteFileOwned).
	owner    int
	group    int // -1: the creator's
	setOwner bool
}

func (h *hooks) check(step string) error {
	if h == nil || h.before == nil {
		return nil
	}
	return h.before(step)
}

// WriteFile writes data to path atomically and durably: temp file in the same
// directory, write, fsync, chmod perm, close, rename over path, fsync the
// directory. On any error the temp file is removed and path is untouched,
// except that a failure to fsync the directory is reported after the rename
// has happened: path then holds the new content, which may not yet be durable.
//
// perm is applied with chmod, so the process umask does not narrow it. While it
// is being written the temp file has mode 0600, so secrets are never readable
// by others even for a moment.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	return write(path, data, perm, false, nil)
}

// WriteFileOwned is WriteFile whose file belongs to the user uid once it takes
// path's name: the temp file is given to uid through its descriptor before the
// rename. A chown of path after the rename goes by name, and follows a link that
// another user able to write in the directory puts in the new file's place, giving
// uid whatever file the link names.
func WriteFileOwned(path string, data []byte, perm fs.FileMode, uid, gid int) error {
	return write(path, data, perm, false, &hooks{owner: uid, group: gid, setOwner: true})
}

// CreateExclusive is WriteFile that never replaces an existing file: it links
// the synced temp file to path (os.Link fails if path exists, and the error then
// wraps fs.ErrExist), then removes the temp name and fsyncs the directory.
//
// Because the final name appears through a hard link, the file system must
// support hard links; on one that does not, CreateExclusive fails without
// creating path.
func CreateExclusive(path string, data []byte, perm fs.FileMode) error {
	return write(path, data, perm, true, nil)
}

func write(path string, data []byte, perm fs.FileMode, exclusive bool, h *hooks) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	if base == "" {
		return fmt.Errorf("atomicfile: %q names a directory, not a file", path)
	}
	// The leading dot keeps the temp file out of casual listings; the base name
	// in it tells a person who finds one after a crash what it was meant to be.
	f, tmp, err := createTemp(dir, base)
	if err != nil {
		return fmt.Errorf("atomicfile: writing %s: %w", path, err)
	}
	closed := false
	defer func() {
		if err == nil {
			return
		}
		if !closed {
			f.Close()
		}
		// Best effort: the temp name is ours alone, and reporting a failure to
		// remove it would hide the error that matters.
		os.Remove(tmp)
	}()

	step := func(name string, fn func() error) error {
		if err := h.check(name); err != nil {
			return err
		}
		return fn()
	}
	if err := step("write", func() error { _, err := f.Write(data); return err }); err != nil {
		return fmt.Errorf("atomicfile: writing %s: %w", path, err)
	}
	if err := step("sync", f.Sync); err != nil {
		return fmt.Errorf("atomicfile: flushing %s to disk: %w", path, err)
	}
	if err := step("chmod", func() error { return f.Chmod(perm) }); err != nil {
		return fmt.Errorf("atomicfile: setting the mode of %s: %w", path, err)
	}
	if h != nil && h.setOwner {
		if err := step("chown", func() error { return f.Chown(h.owner, h.group) }); err != nil {
			return fmt.Errorf("atomicfile: giving %s to uid %d: %w", path, h.owner, err)
		}
	}
	// Close can report a deferred write error (on NFS, for instance), so it is
	// checked like any other step.
	if err := step("close", f.Close); err != nil {
		return fmt.Errorf("atomicfile: writing %s: %w", path, err)
	}
	closed = true

	if exclusive {
		if err := step("link", func() error { return os.Link(tmp, path) }); err != nil {
			if errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("atomicfile: %s already exists and is never replaced: %w", path, err)
			}
			return fmt.Errorf("atomicfile: creating %s: %w", path, err)
		}
		// path now holds the data; the temp name is only a second link to it.
		// Failing to remove it leaves a stray file, not a wrong one, so it does
		// not undo a creation that succeeded.
		os.Remove(tmp)
	} else {
		if err := step("rename", func() error { return os.Rename(tmp, path) }); err != nil {
			return fmt.Errorf("atomicfile: replacing %s: %w", path, err)
		}
	}
	if err := step("syncdir", func() error { return SyncDir(dir) }); err != nil {
		return fmt.Errorf("atomicfile: %s was written but its directory could not be flushed to disk: %w", path, err)
	}
	return nil
}

// NoPoll, among the flags of an open, tells Go not to offer the file to its
// network poller, which cannot take regular files or directories: without it
// every open costs four fcntl calls and a failing epoll_ctl besides the openat,
// for a write here half of its system calls. O_NONBLOCK changes nothing for
// regular files and directories, and a FIFO put in a file's place opens without
// waiting for a writer.
const NoPoll = syscall.O_NONBLOCK

// createTemp is os.CreateTemp(dir, "."+base+".tmp-*") opened with NoPoll: a new
// file, mode 0600, and its name.
func createTemp(dir, base string) (*os.File, string, error) {
	for try := 0; ; try++ {
		name := filepath.Join(dir, "."+base+".tmp-"+strconv.FormatUint(uint64(rand.Uint32()), 10))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL|NoPoll, 0o600)
		if errors.Is(err, fs.ErrExist) && try < 10000 {
			continue
		}
		return f, name, err
	}
}

// MkdirAll is os.MkdirAll, and flushes the parent of each directory it made: a file
// written durably in a new directory (WriteFile flushes the directory it is in) is
// lost all the same after a power cut that loses the directory's own name, on a
// file system that does not commit one directory's changes with another's.
// Nothing is flushed when dir exists.
func MkdirAll(dir string, perm fs.FileMode) error {
	var made []string // the directories missing, innermost first
	for d := filepath.Clean(dir); ; {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			break // there, or not known missing: os.MkdirAll says what is wrong
		}
		made = append(made, d)
		parent := filepath.Dir(d)
		if parent == d {
			break
		}
		d = parent
	}
	if err := os.MkdirAll(dir, perm); err != nil {
		return err
	}
	for _, d := range made {
		if err := SyncDir(filepath.Dir(d)); err != nil && !errors.Is(err, fs.ErrPermission) {
			// A parent this user may write but not read (mode 0333) cannot be
			// opened to flush: the directory is made, as os.MkdirAll made it.
			return fmt.Errorf("flushing the directory %s was made in: %w", d, err)
		}
	}
	return nil
}

// SyncDir flushes a directory so that a rename or link in it (or a file made in
// it) survives a crash. A file system that cannot flush a directory, and says so,
// is not an error: its names are as durable as they will ever be.
func SyncDir(dir string) error {
	d, err := os.OpenFile(dir, os.O_RDONLY|NoPoll, 0)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	// Some file systems cannot flush a directory and say so; their renames are
	// as durable as they will ever be, and refusing to proceed would help no one.
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOTSUP) {
		return nil
	}
	return err
}

// RemoveStale removes from dir the temporary files a write left when its process
// was killed or the machine lost power between creating one and renaming or
// removing it (".<name>.tmp-<digits>", regular files only), and returns their
// names. Nothing else ever removes them: a temporary copy of an identity file kept
// the node's key after the identity was removed by hand to enrol afresh. Call it
// only while no write into dir can be under way: with the directory's lock held.
func RemoveStale(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, e := range entries {
		if !e.Type().IsRegular() || !isTempName(e.Name()) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return removed, err
		}
		removed = append(removed, e.Name())
	}
	return removed, nil
}

// isTempName reports whether name is one createTemp makes: "." base ".tmp-" digits.
func isTempName(name string) bool {
	if len(name) < 2 || name[0] != '.' {
		return false
	}
	i := strings.LastIndex(name, ".tmp-")
	if i < 2 { // a base of at least one character
		return false
	}
	digits := name[i+len(".tmp-"):]
	if digits == "" {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
