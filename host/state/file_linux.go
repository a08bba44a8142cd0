//go:build linux

package state

import (
	"io"
	"io/fs"
	"syscall"
)

// storeFile is the state file open for a Save, by its raw descriptor: opened as an
// os.File, it cost a failing epoll_ctl at every save (os offers a file it opens to
// its network poller, which takes no regular file).
type storeFile struct {
	fd   int
	path string
}

// openStoreFile opens the state file at path to read and write it, never through a
// symbolic link at its name (ELOOP), and without waiting if a named pipe is there.
func openStoreFile(path string) (*storeFile, error) {
	var fd int
	err := ignoringEINTR(func() (err error) {
		fd, err = syscall.Open(path, syscall.O_RDWR|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return &storeFile{fd: fd, path: path}, nil
}

// stamp reads the file's stamp (fstat).
func (f *storeFile) stamp() (stamp, bool) {
	var st syscall.Stat_t
	if ignoringEINTR(func() error { return syscall.Fstat(f.fd, &st) }) != nil {
		return stamp{}, false
	}
	return stampOfStat(&st)
}

// readAt reads len(b) bytes at off, as os.File.ReadAt: fewer only with an error,
// io.EOF at the end of the file.
func (f *storeFile) readAt(b []byte, off int64) (int, error) {
	done := 0
	for done < len(b) {
		var n int
		err := ignoringEINTR(func() (err error) { n, err = syscall.Pread(f.fd, b[done:], off+int64(done)); return err })
		if err != nil {
			return done, &fs.PathError{Op: "read", Path: f.path, Err: err}
		}
		if n == 0 {
			return done, io.EOF
		}
		done += n
	}
	return done, nil
}

// writeAt writes b at off, whole or with an error.
func (f *storeFile) writeAt(b []byte, off int64) error {
	for len(b) > 0 {
		var n int
		err := ignoringEINTR(func() (err error) { n, err = syscall.Pwrite(f.fd, b, off); return err })
		if err != nil {
			return &fs.PathError{Op: "write", Path: f.path, Err: err}
		}
		if n == 0 {
			return &fs.PathError{Op: "write", Path: f.path, Err: io.ErrShortWrite}
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

// datasync flushes the file's data, and of its metadata only what reading the data
// back needs: an overwrite in place changes the size of nothing, so the disk is
// spared the inode's timestamps.
func (f *storeFile) datasync() error {
	if err := ignoringEINTR(func() error { return syscall.Fdatasync(f.fd) }); err != nil {
		return &fs.PathError{Op: "fdatasync", Path: f.path, Err: err}
	}
	return nil
}

func (f *storeFile) close() error { return syscall.Close(f.fd) }

func ignoringEINTR(call func() error) error {
	for {
		if err := call(); err != syscall.EINTR {
			return err
		}
	}
}
