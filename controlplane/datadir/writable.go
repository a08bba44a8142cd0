package datadir

import (
	"errors"
	"fmt"
	"syscall"

	"mesh/host/atomicfile"
	"mesh/host/dirlock"
)

// ErrDiskFull means the file system under the data directory has no room left for
// what a command had to write there. See *DiskFullError.
var ErrDiskFull = errors.New("the disk under the data directory is full")

// DiskFullError is a write into the data directory refused for want of space (ENOSPC,
// or EDQUOT: this user's quota):
// Doing is what was being written, Err the file system's error. It matches
// ErrDiskFull, and dirlock.ErrNotWritable too: like a directory on a read-only file
// system, one that cannot be written now is the data directory's fault, which
// running the command again does not mend until someone frees space (meshctl exits 7
// for it, and systemd does not restart serve).
type DiskFullError struct {
	Dir   string
	Doing string
	Err   error
}

func (e *DiskFullError) Error() string {
	doing := ""
	if e.Doing != "" {
		doing = e.Doing + ": "
	}
	return fmt.Sprintf("%sthe disk under the data directory %s is full (%v): free space under %s, then run the command again",
		doing, e.Dir, e.Err, e.Dir)
}

// Is reports whether target is ErrDiskFull or dirlock.ErrNotWritable.
func (e *DiskFullError) Is(target error) bool {
	return target == ErrDiskFull || target == dirlock.ErrNotWritable
}

// Unwrap returns the file system's error.
func (e *DiskFullError) Unwrap() error { return e.Err }

// WriteFailed says, in the data directory's words, why a write into it (doing, for
// the message) failed when the cause is the directory's place rather than the
// command: a read-only file system or a place this user may not write
// (*dirlock.NotWritableError, as the lock says of an existing directory), or a full
// disk (*DiskFullError). Any other error, or nil, is returned as it is. Without it
// those were raw ("mkdir X: read-only file system", "commit init: write
// X/raft/raft.db: no space left on device"), exit 1, where the same faults on a
// directory that existed, or while serve runs, said what to do.
func (d Dir) WriteFailed(doing string, err error) error {
	var nw *dirlock.NotWritableError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &nw):
		return err // said already, in the same words
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return &DiskFullError{Dir: string(d), Doing: doing, Err: err}
	case errors.Is(err, syscall.EROFS), errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return &dirlock.NotWritableError{What: dataDirectory, Dir: string(d), Err: err}
	}
	return err
}

// Make creates the data directory, mode 0700, and its missing parents, each
// flushed into its parent (atomicfile.MkdirAll: bootstrap's files outlast a power
// cut only if the directory's name does); one that exists is left as it is. Its
// failures for the directory's place are WriteFailed's.
func (d Dir) Make() error {
	return d.WriteFailed("", atomicfile.MkdirAll(string(d), 0o700))
}
