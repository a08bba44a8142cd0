//go:build linux

package apply

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// On Linux every step of an Apply is a system call on a raw descriptor: the
// managed root RootGuard opened, the directories opened from it one name at a time
// (openat with O_NOFOLLOW), the new file made in one (O_CREAT|O_EXCL). An os.File
// cost each of them a failing epoll_ctl (os offers regular files and directories
// to its network poller), or an fcntl (os.NewFile), and an os.Root opened again for
// each directory written in cost four more: a third of the agent's system calls for
// a declaration (docs/benchmarks.md, the twenty-fifth).

// rootDir is the managed root as RootGuard opened it: its descriptor, which the
// Apply's handle of the root itself uses, and which the Apply closes at its end.
type rootDir struct{ fd int }

// Close closes the root's descriptor.
func (r *rootDir) Close() error { return unix.Close(r.fd) }

// openRoot opens the directory at path (following a link there: the operator's
// configuration, not the declaration's) and returns what fstat says of it.
// O_DIRECTORY refuses anything but a directory without opening it: a named pipe
// opened as a file waits for a writer that may never come, the agent held with it.
func openRoot(path string) (*rootDir, fs.FileInfo, error) {
	var fd int
	err := ignoringEINTR(func() (err error) {
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		return err
	})
	if err != nil {
		perr := &fs.PathError{Op: "open", Path: path, Err: err}
		if errors.Is(err, unix.ENOTDIR) {
			return nil, nil, notADirectory(path, perr)
		}
		return nil, nil, perr
	}
	fi := &statInfo{name: path}
	if err := fstat(fd, &fi.st); err != nil {
		unix.Close(fd)
		return nil, nil, &fs.PathError{Op: "fstat", Path: path, Err: err}
	}
	return &rootDir{fd: fd}, fi, nil
}

// notADirectory is openRoot's error for what stands at path when it is not a
// directory (ENOTDIR), saying what it is; err, the open's, when that cannot be told.
func notADirectory(path string, err error) error {
	if fi, serr := os.Stat(path); serr == nil && !fi.IsDir() {
		return fmt.Errorf("%s is a %s, not a directory: %w", path, kind(fi.Mode()), syscall.ENOTDIR)
	}
	return err
}

// sysDir is what a dirHandle holds on Linux: the directory's descriptor.
type sysDir struct {
	fd     int
	opened bool // fd is the directory's (the root's is borrowed from run.root)
	// verified says the directory's path was found to lead to fd (ready).
	verified bool
}

func (d *dirHandle) isOpen() bool { return d.opened }

// dirFd returns the directory's descriptor, opened once: the root's is the one
// RootGuard opened and judged; any other is opened from its parent's, never
// following a link at its name.
func (d *dirHandle) dirFd() (int, error) {
	if d.opened {
		return d.fd, nil
	}
	if d.parent == nil {
		d.fd, d.opened = d.run.root.fd, true
		return d.fd, nil
	}
	pfd, err := d.parent.dirFd()
	if err != nil {
		return -1, err
	}
	// Makes room for d, if need be, among the handles other than those above it:
	// pfd stays open.
	fd, err := d.openIn(pfd)
	if err != nil {
		return -1, dirOpenError(d.name, pfd, err)
	}
	return fd, nil
}

// openIn opens the directory from its parent's descriptor pfd, never following a
// link at its name. The error is the system's: ENOENT, or ENOTDIR for a link or
// anything else that is not a directory.
func (d *dirHandle) openIn(pfd int) (int, error) {
	d.run.makeRoom(d)
	fd, err := openDirAt(pfd, path.Base(d.name))
	if err != nil {
		return -1, err
	}
	d.fd, d.opened, d.verified = fd, true, false
	d.run.open++
	return fd, nil
}

// close gives back the handle's descriptor; it is opened again when needed. The
// root's is the run's, closed at its end.
func (d *dirHandle) close() {
	if !d.opened {
		return
	}
	if d.parent != nil {
		unix.Close(d.fd)
		d.run.open--
	}
	d.opened, d.verified = false, false
}

// ready readies the directory for a step that changes it: opened, and its path
// still leading to it, from the root down. The steps go through the descriptor,
// so a directory swapped since it was opened cannot redirect them; but the file
// written would not be at its path (and one removed would be another's), so the
// Apply fails instead, and is undone. Checked once per handle opened: two system
// calls, where opening an os.Root by name and comparing it with the directory
// cost five.
func (d *dirHandle) ready() error {
	if d.parent == nil {
		_, err := d.dirFd()
		return err
	}
	if d.opened && d.verified {
		return nil
	}
	// The parent first: opening it again may close d (makeRoom), never the
	// reverse, as d's own open keeps the handles above it.
	if err := d.parent.ready(); err != nil {
		return err
	}
	fd, err := d.dirFd()
	if err != nil {
		return err
	}
	var here, there unix.Stat_t
	err1 := fstat(fd, &here)
	err2 := ignoringEINTR(func() error {
		return unix.Fstatat(d.parent.fd, path.Base(d.name), &there, unix.AT_SYMLINK_NOFOLLOW)
	})
	if err1 != nil || err2 != nil || here.Dev != there.Dev || here.Ino != there.Ino {
		return &PathError{Path: d.name, Err: ErrEscapesRoot,
			Reason: "the directory was replaced since the agent opened it (a link swapped in?): something else writes in the managed root"}
	}
	d.verified = true
	return nil
}

// onTheWay says what stands at dir, a directory on the way to a path (checkParents),
// without following a link: a directory is opened there and then (its handle, which
// the steps in it use), which tells it from a link or a file in the one system call
// a look at it cost; anything else is looked at. goingAway is a file to be removed
// first, only looked at. A missing dir is an error matching fs.ErrNotExist.
func (r *run) onTheWay(dir string, goingAway bool) (fs.FileMode, error) {
	d := r.dir(dir)
	if d.opened && !goingAway {
		return fs.ModeDir, nil // opened without following a link, for another path
	}
	pfd, err := d.parent.dirFd()
	if err != nil {
		return 0, err
	}
	if !goingAway {
		_, err := d.openIn(pfd)
		if err == nil {
			return fs.ModeDir, nil
		}
		if !errors.Is(err, unix.ENOTDIR) && !errors.Is(err, unix.ELOOP) {
			return 0, &fs.PathError{Op: "open", Path: dir, Err: err}
		}
	}
	var st unix.Stat_t
	if err := ignoringEINTR(func() error {
		return unix.Fstatat(pfd, path.Base(dir), &st, unix.AT_SYMLINK_NOFOLLOW)
	}); err != nil {
		return 0, &fs.PathError{Op: "lstat", Path: dir, Err: err}
	}
	return fileMode(st.Mode), nil
}

// lstat looks at name in the directory without following a link.
func (d *dirHandle) lstat(name string) (fs.FileInfo, error) {
	fd, err := d.dirFd()
	if err != nil {
		return nil, err
	}
	fi := &statInfo{name: name}
	if err := ignoringEINTR(func() error {
		return unix.Fstatat(fd, name, &fi.st, unix.AT_SYMLINK_NOFOLLOW)
	}); err != nil {
		return nil, &fs.PathError{Op: "lstat", Path: path.Join(d.name, name), Err: err}
	}
	return fi, nil
}

// mkdir makes the directory name in d, mode 0755 less the umask.
func (d *dirHandle) mkdir(name string) error {
	return d.at("mkdir", name, func(fd int) error { return unix.Mkdirat(fd, name, 0o755) })
}

// removeFile removes name from d, never a directory (EISDIR).
func (d *dirHandle) removeFile(name string) error {
	return d.at("remove", name, func(fd int) error { return unix.Unlinkat(fd, name, 0) })
}

// removeDir removes the empty directory name from d, never a file (ENOTDIR).
func (d *dirHandle) removeDir(name string) error {
	return d.at("remove", name, func(fd int) error { return unix.Unlinkat(fd, name, unix.AT_REMOVEDIR) })
}

// rename renames from to to in d: a link at to is replaced, never followed.
func (d *dirHandle) rename(from, to string) error {
	fd, err := d.dirFd()
	if err != nil {
		return err
	}
	if err := ignoringEINTR(func() error { return unix.Renameat(fd, from, fd, to) }); err != nil {
		return &os.LinkError{Op: "rename", Old: path.Join(d.name, from), New: path.Join(d.name, to), Err: err}
	}
	return nil
}

// sync flushes the directory, so that a rename, creation or removal in it
// survives a crash.
func (d *dirHandle) sync() error {
	return d.at("sync", ".", func(fd int) error { return unix.Fsync(fd) })
}

// at runs the system call call on the directory's descriptor, name naming what it
// is about in its error.
func (d *dirHandle) at(op, name string, call func(fd int) error) error {
	fd, err := d.dirFd()
	if err != nil {
		return err
	}
	if err := ignoringEINTR(func() error { return call(fd) }); err != nil {
		return &fs.PathError{Op: op, Path: path.Join(d.name, name), Err: err}
	}
	return nil
}

// createTemp makes the new file name in d, mode 0600, to write: never through a
// link (O_EXCL fails on any name that exists, a link included).
func (d *dirHandle) createTemp(name string) (*tempFile, error) {
	dfd, err := d.dirFd()
	if err != nil {
		return nil, err
	}
	p := path.Join(d.name, name)
	var fd int
	if err := ignoringEINTR(func() (err error) {
		fd, err = unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		return err
	}); err != nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	return &tempFile{fd: fd, name: p}, nil
}

// eachName calls fn with each name in the directory but "." and "..", a buffer of
// them at a time (buf, run.direntBuffer's: about sweepBatch), and reports whether it
// read them all and fn returned true for each. In batches: a directory of the root
// others may write in can hold as many names as they care to make (65,000 links of
// 247-byte names cost the agent 21 MB read whole), and the sweep needs only the few
// that are ours.
func (d *dirHandle) eachName(buf []byte, fn func(name string) bool) bool {
	fd, err := d.dirFd()
	if err != nil {
		return false
	}
	var names []string
	complete := true
	for {
		var n int
		if err := ignoringEINTR(func() (err error) { n, err = unix.ReadDirent(fd, buf); return err }); err != nil {
			return false
		}
		if n <= 0 {
			return complete
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names[:0])
		for _, name := range names {
			if !fn(name) {
				complete = false
			}
		}
	}
}

// tempFile is the new file writeAtomic writes, by its descriptor.
type tempFile struct {
	fd     int
	name   string // in the managed root, for errors
	closed bool
}

func (f *tempFile) write(b []byte) error {
	for len(b) > 0 {
		var n int
		if err := ignoringEINTR(func() (err error) { n, err = unix.Write(f.fd, b); return err }); err != nil {
			return &fs.PathError{Op: "write", Path: f.name, Err: err}
		}
		if n <= 0 {
			return &fs.PathError{Op: "write", Path: f.name, Err: io.ErrShortWrite}
		}
		b = b[n:]
	}
	return nil
}

func (f *tempFile) sync() error {
	return f.call("sync", func() error { return unix.Fsync(f.fd) })
}

// owner returns the file's owner and group, as fstat says.
func (f *tempFile) owner() (uid, gid int, ok bool) {
	var st unix.Stat_t
	if fstat(f.fd, &st) != nil {
		return -1, -1, false
	}
	return int(st.Uid), int(st.Gid), true
}

func (f *tempFile) chown(uid, gid int) error {
	return f.call("chown", func() error { return unix.Fchown(f.fd, uid, gid) })
}

func (f *tempFile) chmod(mode fs.FileMode) error {
	return f.call("chmod", func() error { return unix.Fchmod(f.fd, unixPerm(mode)) })
}

// close closes the file once; again, it does nothing (the descriptor's number may
// be another file's by then).
func (f *tempFile) close() error {
	if f.closed {
		return nil
	}
	f.closed = true
	if err := unix.Close(f.fd); err != nil {
		return &fs.PathError{Op: "close", Path: f.name, Err: err}
	}
	return nil
}

func (f *tempFile) call(op string, call func() error) error {
	if err := ignoringEINTR(call); err != nil {
		return &fs.PathError{Op: op, Path: f.name, Err: err}
	}
	return nil
}

// unixPerm is the chmod(2) mode of m: its permission bits, and the setuid, setgid
// and sticky bits.
func unixPerm(m fs.FileMode) uint32 {
	mode := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= unix.S_ISUID
	}
	if m&fs.ModeSetgid != 0 {
		mode |= unix.S_ISGID
	}
	if m&fs.ModeSticky != 0 {
		mode |= unix.S_ISVTX
	}
	return mode
}

// openDirAt opens the directory called name in the directory dirfd, never
// following a link at that name (a link fails with ENOTDIR, as anything else that
// is not a directory does, or ELOOP).
func openDirAt(dirfd int, name string) (int, error) {
	var fd int
	err := ignoringEINTR(func() (err error) {
		fd, err = unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		return err
	})
	return fd, err
}

// dirOpenError explains openDirAt's failure to open the directory p, called name
// in pfd: a link (swapped in since the agent looked?) is refused as one, since
// declared files are never written through links.
func dirOpenError(p string, pfd int, err error) error {
	if errors.Is(err, unix.ENOTDIR) {
		var st unix.Stat_t
		if unix.Fstatat(pfd, path.Base(p), &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			err = unix.ELOOP
		}
	}
	switch {
	case errors.Is(err, unix.ELOOP):
		return &PathError{Path: p, Err: ErrEscapesRoot,
			Reason: "it is a symbolic link (swapped in since the agent looked?), and declared files are never written through links"}
	case errors.Is(err, unix.ENOTDIR):
		return &PathError{Path: p, Err: ErrInvalidPath, Reason: "it is no longer a directory: something else writes in the managed root"}
	}
	return &fs.PathError{Op: "open", Path: p, Err: err}
}

func fstat(fd int, st *unix.Stat_t) error {
	return ignoringEINTR(func() error { return unix.Fstat(fd, st) })
}

// statInfo is the fs.FileInfo of a stat(2) result; Sys is its *unix.Stat_t.
type statInfo struct {
	name string
	st   unix.Stat_t
}

func (s *statInfo) Name() string       { return path.Base(s.name) }
func (s *statInfo) Size() int64        { return s.st.Size }
func (s *statInfo) Mode() fs.FileMode  { return fileMode(s.st.Mode) }
func (s *statInfo) ModTime() time.Time { return time.Unix(s.st.Mtim.Unix()) }
func (s *statInfo) IsDir() bool        { return s.Mode().IsDir() }
func (s *statInfo) Sys() any           { return &s.st }

// holds reports whether the directory holds name, and whether it is a regular file
// there, without following a link: one system call and nothing allocated, as it is
// asked of every directory an Apply goes through (meshDirectory).
func (d *dirHandle) holds(name string) (exists, regular bool) {
	fd, err := d.dirFd()
	if err != nil {
		return false, false
	}
	var st unix.Stat_t
	if err := ignoringEINTR(func() error { return unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) }); err != nil {
		return false, false
	}
	return true, st.Mode&unix.S_IFMT == unix.S_IFREG
}
