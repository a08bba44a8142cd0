package datadir

import (
	"errors"
	"io/fs"
	"syscall"

	"mesh/host/atomicfile"
	"mesh/host/dirlock"
)

// LockFile is the data directory's lock: one process at a time works on a data
// directory (`meshctl serve`, `bootstrap` or `join`). See package dirlock: flock(2),
// released by the kernel however its holder exits, the file never removed.
const LockFile = dirlock.File

// ErrInUse means another process holds the data directory's lock.
var ErrInUse = dirlock.ErrInUse

// InUseError says which process holds a data directory's lock. It matches ErrInUse.
type InUseError = dirlock.InUseError

// Lock is a held data directory lock.
type Lock = dirlock.Lock

// dataDirectory is what the lock's refusal calls the directory.
const dataDirectory = "data directory"

// Lock takes the data directory's lock for this process, recording its pid and
// command (say "meshctl serve") in the lock file, or refuses at once with an
// *InUseError naming the holder. The directory must exist (the error then matches
// fs.ErrNotExist), and be one: anything else is a *NotADirectoryError. The lock
// file is created if needed. Release it, or exit.
//
// With the lock held no write into the directory is under way: the temporary files
// of writes a killed process cut short are removed then. Left, they were never
// removed (a copy of admin.creds logged in as the operator), and bootstrap and join
// refused to resume in a directory "not empty" for them alone.
func (d Dir) Lock(command string) (*Lock, error) {
	// A file where the directory belongs: said as such, not "open the lock of X".
	if err := d.CheckIsDir(); err != nil {
		return nil, err
	}
	l, err := dirlock.Acquire(dataDirectory, string(d), command)
	if err == nil {
		_, _ = atomicfile.RemoveStale(string(d)) // best effort: they only take room
	}
	if errors.Is(err, syscall.ENOSPC) && !errors.Is(err, dirlock.ErrNotWritable) {
		// No room for the holder's record: a full disk, said so (it was a bare
		// "record this process in X/lock: no space left on device"). The lock
		// says so itself now; said once, not wrapped in a second telling.
		return nil, d.WriteFailed("", err)
	}
	return l, err
}

// LockExisting is Lock for a command that changes nothing (`bootstrap --dry-run`):
// it creates nothing, and when the directory or its lock file does not exist it
// returns a nil *Lock and no error, since no process holds a lock there.
// Held, it removes the temporary files of writes cut short, as Lock does.
func (d Dir) LockExisting(command string) (*Lock, error) {
	if err := d.CheckIsDir(); err != nil {
		return nil, err
	}
	l, err := dirlock.AcquireExisting(dataDirectory, string(d), command)
	if err == nil && l != nil {
		_, _ = atomicfile.RemoveStale(string(d))
	}
	return l, err
}

// CheckNotInUse is for a command that only reads the directory (`meshctl check`):
// an *InUseError naming the holder when another process holds the lock (serve,
// bootstrap, join), nil otherwise. It takes no lock and writes nothing: a serve
// started while the command reads is not refused for it (dirlock.Probe).
func (d Dir) CheckNotInUse() error {
	if err := d.CheckIsDir(); err != nil {
		return err
	}
	err := dirlock.Probe(dataDirectory, string(d))
	if errors.Is(err, fs.ErrPermission) {
		// Another user's directory: said as for every other file of it.
		return &UnreadableError{Path: d.Path(LockFile), Err: err}
	}
	return err
}
