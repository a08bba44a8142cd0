//go:build linux

package apply

import (
	"errors"
	"io/fs"
	"syscall"

	"mesh/host/atomicfile"
)

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
	dir, err := d.dirFd()
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

// openAt opens name in the directory dirfd with existingFlags.
func openAt(dirfd int, name string) (int, error) {
	fd := -1
	if err := ignoringEINTR(func() (err error) {
		fd, err = syscall.Openat(dirfd, name, existingFlags, 0)
		return err
	}); err != nil {
		return -1, &fs.PathError{Op: "openat", Path: name, Err: err}
	}
	return fd, nil
}

// notOpened explains an open that failed otherwise than for a missing file or a
// link: a socket, or a device without a driver, cannot be opened at all, and is
// refused as any file that is not regular; anything else is the open's error.
func (r *run) notOpened(d *dirHandle, p, name string, openErr error, declared bool) error {
	if fi, err := d.lstat(name); err == nil {
		if refusal := checkExisting(p, fi.Mode(), fi.Size(), declared); refusal != nil {
			return refusal
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
