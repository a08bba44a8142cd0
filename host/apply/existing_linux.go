//go:build linux

package apply

import (
	"errors"
	"io/fs"
	"os"
	"syscall"

	"mesh/host/atomicfile"
)

// openDirFlag makes opening a directory handle fail if a directory is no
// longer there.
const openDirFlag = syscall.O_DIRECTORY

// existingFlags open a file found at a managed path, to read it: never through
// a symbolic link at its name (O_NOFOLLOW: the open fails with ELOOP instead),
// never as the agent's controlling terminal, without waiting if a FIFO is
// there (atomicfile.NoPoll), and closed in the hooks the agent runs.
const existingFlags = syscall.O_RDONLY | syscall.O_NOFOLLOW | syscall.O_NOCTTY | syscall.O_CLOEXEC | atomicfile.NoPoll

// readExistingAt reads the file called name in d (the managed path p) in one
// open relative to the directory's descriptor that does not follow a link,
// and takes its type, size, mode and owner from fstat on the descriptor: what
// is checked is what is read, whatever is renamed meanwhile. The open and the
// fstat replace a lookup of the name and an open, so this costs no system call
// more than reading the file did before it was checked this way.
func (r *run) readExistingAt(d *dirHandle, p, name string, declared bool) (*saved, error) {
	dir, err := d.dirFile()
	if err != nil {
		return nil, inspectError(p, err)
	}
	fd, err := openAt(dir, name)
	switch {
	case errors.Is(err, syscall.ENOENT):
		return nil, nil
	case errors.Is(err, syscall.ELOOP):
		return nil, linkFound(p, declared)
	case err != nil:
		return nil, r.notOpened(d, p, name, err, declared)
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := ignoringEINTR(func() error { return syscall.Fstat(fd, &st) }); err != nil {
		return nil, inspectError(p, &fs.PathError{Op: "fstat", Path: p, Err: err})
	}
	mode := fileMode(st.Mode)
	if err := checkExisting(p, mode, st.Size, declared); err != nil {
		return nil, err
	}
	if r.skipRead(p, declared, st.Size) {
		return &saved{mode: mode & modeBits, uid: int(st.Uid), gid: int(st.Gid), unread: true}, nil
	}
	data, err := readCapped(func(b []byte) (int, error) { return readFd(fd, b) }, st.Size)
	if err != nil {
		return nil, readError(p, err, declared)
	}
	return &saved{data: data, mode: mode & modeBits, uid: int(st.Uid), gid: int(st.Gid)}, nil
}

// openAt opens name in the directory dir with existingFlags.
func openAt(dir *os.File, name string) (int, error) {
	rc, err := dir.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	var oerr error
	if err := rc.Control(func(dirfd uintptr) {
		oerr = ignoringEINTR(func() (err error) {
			fd, err = syscall.Openat(int(dirfd), name, existingFlags, 0)
			return err
		})
	}); err != nil {
		return -1, err
	}
	if oerr != nil {
		return -1, &fs.PathError{Op: "openat", Path: name, Err: oerr}
	}
	return fd, nil
}

// notOpened explains an open that failed otherwise than for a missing file or a
// link: a socket, or a device without a driver, cannot be opened at all, and is
// refused as any file that is not regular; anything else is the open's error.
func (r *run) notOpened(d *dirHandle, p, name string, openErr error, declared bool) error {
	if root, err := d.writeRoot(); err == nil {
		if fi, err := root.Lstat(name); err == nil {
			if refusal := checkExisting(p, fi.Mode(), fi.Size(), declared); refusal != nil {
				return refusal
			}
		}
	}
	return inspectError(p, openErr)
}

func readFd(fd int, b []byte) (int, error) {
	var n int
	err := ignoringEINTR(func() (err error) {
		n, err = syscall.Read(fd, b)
		return err
	})
	if n < 0 {
		n = 0
	}
	return n, err
}

func ignoringEINTR(f func() error) error {
	for {
		if err := f(); err != syscall.EINTR {
			return err
		}
	}
}

// fileMode is the fs.FileMode of a stat(2) mode.
func fileMode(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	switch m & syscall.S_IFMT {
	case syscall.S_IFREG:
	case syscall.S_IFDIR:
		mode |= fs.ModeDir
	case syscall.S_IFLNK:
		mode |= fs.ModeSymlink
	case syscall.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case syscall.S_IFSOCK:
		mode |= fs.ModeSocket
	case syscall.S_IFBLK:
		mode |= fs.ModeDevice
	case syscall.S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	default:
		mode |= fs.ModeIrregular
	}
	for _, b := range []struct {
		unix uint32
		mode fs.FileMode
	}{{syscall.S_ISUID, fs.ModeSetuid}, {syscall.S_ISGID, fs.ModeSetgid}, {syscall.S_ISVTX, fs.ModeSticky}} {
		if m&b.unix != 0 {
			mode |= b.mode
		}
	}
	return mode
}

// openDirIn opens the directory called name in parent, by its descriptor, never
// following a link at that name: a link (swapped in since the inspection) or
// anything but a directory is refused. p names it in messages.
func openDirIn(parent *os.File, name, p string, _ *os.Root) (*os.File, error) {
	rc, err := parent.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd := -1
	var oerr error
	if err := rc.Control(func(dirfd uintptr) {
		oerr = ignoringEINTR(func() (err error) {
			fd, err = syscall.Openat(int(dirfd), name, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
			return err
		})
	}); err != nil {
		return nil, err
	}
	switch {
	case errors.Is(oerr, syscall.ELOOP):
		return nil, &PathError{Path: p, Err: ErrEscapesRoot,
			Reason: "it is a symbolic link (swapped in since the agent looked?), and declared files are never written through links"}
	case errors.Is(oerr, syscall.ENOTDIR):
		return nil, &PathError{Path: p, Err: ErrInvalidPath, Reason: "it is no longer a directory: something else writes in the managed root"}
	case oerr != nil:
		return nil, &fs.PathError{Op: "open", Path: p, Err: oerr}
	}
	return os.NewFile(uintptr(fd), p), nil
}
