//go:build !linux

package apply

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"syscall"

	"mesh/host/atomicfile"
)

// Where the agent is not built for Linux, the steps go through os.File and os.Root:
// the directory opened from its parent (openDirIn), and a Root opened by name for
// the steps that write in it, checked to be the very directory opened.

// rootDir is the managed root as RootGuard opened it.
type rootDir = os.Root

// openRoot opens the directory at path as an os.Root, and returns what stat says
// of it. Something else there is refused before it is opened: os.OpenRoot opens a
// named pipe as any file, and waits for a writer that may never come, the agent
// held with it.
func openRoot(path string) (*os.Root, fs.FileInfo, error) {
	if fi, err := os.Stat(path); err == nil && !fi.IsDir() {
		return nil, nil, fmt.Errorf("%s is a %s, not a directory: %w", path, kind(fi.Mode()), syscall.ENOTDIR)
	}
	root, err := os.OpenRoot(path)
	if err != nil {
		return nil, nil, err
	}
	fi, err := root.Stat(".")
	if err != nil {
		root.Close()
		return nil, nil, err
	}
	return root, fi, nil
}

// sysDir is what a dirHandle holds: the directory itself, to open the files in it
// and to flush it, and a Root for the steps that write in it.
type sysDir struct {
	file *os.File
	root *os.Root
	own  bool // root is this handle's to close (not the managed root itself)
}

func (d *dirHandle) isOpen() bool { return d.file != nil }

// dirFile returns the directory itself, opened once: from its parent, one name at
// a time where the system allows (openDirIn).
func (d *dirHandle) dirFile() (*os.File, error) {
	if d.file == nil {
		if d.parent == nil {
			f, err := d.run.root.OpenFile(d.name, os.O_RDONLY|atomicfile.NoPoll, 0)
			if err != nil {
				return nil, err
			}
			d.file = f
			return f, nil
		}
		d.run.makeRoom(d)
		pf, err := d.parent.dirFile()
		if err != nil {
			return nil, err
		}
		f, err := openDirIn(pf, path.Base(d.name), d.name, d.run.root)
		if err != nil {
			return nil, err
		}
		d.file = f
		d.run.open++
	}
	return d.file, nil
}

// openDirIn opens the directory p by name from the managed root where there is
// no openat to open it from its parent without following a link.
func openDirIn(_ *os.File, _, p string, managed *os.Root) (*os.File, error) {
	return managed.OpenFile(p, os.O_RDONLY, 0)
}

// close gives back a handle's descriptors; it is opened again when needed.
func (d *dirHandle) close() {
	if d.parent == nil {
		if d.file != nil {
			d.file.Close()
			d.file = nil
		}
		return
	}
	if d.file != nil {
		d.file.Close()
		d.file = nil
		d.run.open--
	}
	if d.own {
		d.root.Close()
		d.root, d.own = nil, false
	}
}

// writeRoot returns the Root the steps on the files in the directory go
// through, opened once. It is the very directory dirFile opened: os.Root opens
// by name, and a directory swapped since is refused.
func (d *dirHandle) writeRoot() (*os.Root, error) {
	if d.root == nil {
		if d.name == "." {
			d.root = d.run.root
			return d.root, nil
		}
		f, err := d.dirFile()
		if err != nil {
			return nil, err
		}
		sub, err := d.run.root.OpenRoot(d.name)
		if err != nil {
			return nil, err
		}
		want, err1 := f.Stat()
		got, err2 := sub.Stat(".")
		if err1 != nil || err2 != nil || !os.SameFile(want, got) {
			sub.Close()
			return nil, &PathError{Path: d.name, Err: ErrEscapesRoot,
				Reason: "the directory was replaced as the agent opened it (a link swapped in?): something else writes in the managed root"}
		}
		d.root, d.own = sub, true
	}
	return d.root, nil
}

// ready readies the directory for a step that changes it (writeRoot).
func (d *dirHandle) ready() error {
	_, err := d.writeRoot()
	return err
}

// onTheWay says what stands at dir, a directory on the way to a path
// (checkParents), without following a link at its name.
func (r *run) onTheWay(dir string, _ bool) (fs.FileMode, error) {
	fi, err := r.root.Lstat(dir)
	if err != nil {
		return 0, err
	}
	return fi.Mode(), nil
}

func (d *dirHandle) lstat(name string) (fs.FileInfo, error) {
	root, err := d.writeRoot()
	if err != nil {
		return nil, err
	}
	return root.Lstat(name)
}

func (d *dirHandle) mkdir(name string) error {
	root, err := d.writeRoot()
	if err != nil {
		return err
	}
	return root.Mkdir(name, 0o755)
}

func (d *dirHandle) removeFile(name string) error {
	root, err := d.writeRoot()
	if err != nil {
		return err
	}
	return root.Remove(name)
}

func (d *dirHandle) removeDir(name string) error { return d.removeFile(name) }

func (d *dirHandle) rename(from, to string) error {
	root, err := d.writeRoot()
	if err != nil {
		return err
	}
	return root.Rename(from, to)
}

// sync flushes the directory, so that a rename, creation or removal in it
// survives a crash.
func (d *dirHandle) sync() error {
	f, err := d.dirFile()
	if err != nil {
		return err
	}
	return f.Sync()
}

func (d *dirHandle) createTemp(name string) (*tempFile, error) {
	root, err := d.writeRoot()
	if err != nil {
		return nil, err
	}
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|atomicfile.NoPoll, 0o600)
	if err != nil {
		return nil, err
	}
	return &tempFile{f}, nil
}

// eachName calls fn with each name in the directory, sweepBatch at a time, and
// reports whether it read them all and fn returned true for each. In batches: a
// directory of the root others may write in can hold as many names as they care to
// make (65,000 links of 247-byte names cost the agent 21 MB read whole), and the
// sweep needs only the few that are ours.
func (d *dirHandle) eachName(_ []byte, fn func(name string) bool) bool {
	f, err := d.dirFile()
	if err != nil {
		return false
	}
	complete := true
	for {
		names, err := f.Readdirnames(sweepBatch)
		for _, name := range names {
			if !fn(name) {
				complete = false
			}
		}
		switch {
		case err == io.EOF, err == nil && len(names) == 0:
			return complete
		case err != nil:
			return false
		}
	}
}

// tempFile is the new file writeAtomic writes.
type tempFile struct{ f *os.File }

func (f *tempFile) write(b []byte) error { _, err := f.f.Write(b); return err }
func (f *tempFile) sync() error          { return f.f.Sync() }

func (f *tempFile) owner() (uid, gid int, ok bool) {
	fi, err := f.f.Stat()
	if err != nil {
		return -1, -1, false
	}
	uid, gid = owner(fi)
	return uid, gid, true
}

func (f *tempFile) chown(uid, gid int) error     { return f.f.Chown(uid, gid) }
func (f *tempFile) chmod(mode fs.FileMode) error { return f.f.Chmod(mode) }
func (f *tempFile) close() error                 { return f.f.Close() }

// holds reports whether the directory holds name, and whether it is a regular file
// there, without following a link.
func (d *dirHandle) holds(name string) (exists, regular bool) {
	fi, err := d.lstat(name)
	if err != nil {
		return false, false
	}
	return true, fi.Mode().IsRegular()
}
