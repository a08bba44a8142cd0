// Package dirlock keeps a directory to one process at a time: a control node's data
// directory (`meshctl serve`, `bootstrap`, `join`) and a host's state directory
// (`meshhost run`, `enrol`), where two processes at once would both write the same
// files. The host imports nothing of the control plane, so the lock lives here and
// the control plane uses it too.
//
// The lock is flock(2) on a file in the directory, so the kernel releases it when its
// holder exits, however it exits; the file itself stays, holding the pid of the last
// holder, and a file left by a process that is gone blocks nothing. It is never
// removed: removing it would let two processes lock two different files of the same
// name.
package dirlock

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"mesh/host/readfile"
)

// File is the lock file's name in the directory it locks.
const File = "lock"

// ErrInUse means another process holds the directory's lock.
var ErrInUse = errors.New("directory in use")

// InUseError says which process holds a directory's lock. It matches ErrInUse.
type InUseError struct {
	// What the directory is ("data directory", "state directory"), for the message.
	What string
	Dir  string
	// PID and Command are what the holder recorded in the lock file; PID is 0 when
	// it has not recorded them yet.
	PID     int
	Command string
	// Asker is the command that asked for the lock ("meshhost run").
	Asker string
}

func (e *InUseError) Error() string {
	what := e.What
	if what == "" {
		what = "directory"
	}
	who := "another process (it has not recorded its pid yet)"
	if e.PID > 0 {
		who = fmt.Sprintf("pid %d", e.PID)
		if e.Command != "" {
			who += " (" + e.Command + ")"
		}
	}
	if program(e.Command) != "" && program(e.Asker) != "" && program(e.Command) != program(e.Asker) {
		// The other program's directory: waiting for it, or stopping it to go on,
		// puts the two programs' files in one directory for good.
		return fmt.Sprintf("%s %s is in use by %s: it is %s's directory, not %s's; give %s a directory of its own",
			what, e.Dir, who, program(e.Command), program(e.Asker), program(e.Asker))
	}
	return fmt.Sprintf("%s %s is in use by %s: one process at a time works on a %s; stop that process or wait for it to finish, then run this again",
		what, e.Dir, who, what)
}

// Is makes errors.Is(err, ErrInUse) hold.
// program is the program of a recorded command ("meshctl serve": "meshctl").
func program(command string) string {
	name, _, _ := strings.Cut(command, " ")
	return name
}

func (e *InUseError) Is(target error) bool { return target == ErrInUse }

// ErrNotALock means something other than a lock file is at the lock's name: a
// symbolic link (never followed) or a directory.
var ErrNotALock = errors.New("not a lock file")

// NotALockError is ErrNotALock with the path and what is there.
type NotALockError struct {
	Path, Kind string
}

func (e *NotALockError) Error() string {
	return fmt.Sprintf("%s is %s, not a lock file this program wrote (it never follows a link there): look at it (ls -l %s), and if it is nothing of yours remove it and run this again", e.Path, e.Kind, e.Path)
}

// Is makes errors.Is(err, ErrNotALock) hold.
func (e *NotALockError) Is(target error) bool { return target == ErrNotALock }

// ErrNotWritable means this process cannot make or write the directory or its lock
// file: the directory belongs to another user, sits on a read-only or full file
// system, or is not a directory.
var ErrNotWritable = errors.New("directory not writable")

// NotWritableError is ErrNotWritable with the directory and the reason.
type NotWritableError struct {
	What, Dir string
	// Err is the error of the mkdir, the open or the write: EACCES, EPERM, EROFS,
	// ENOSPC, EDQUOT or ENOTDIR.
	Err error
}

func (e *NotWritableError) Error() string {
	what := e.What
	if what == "" {
		what = "directory"
	}
	var pe *fs.PathError
	made := errors.As(e.Err, &pe) && pe.Op == "mkdir"
	switch {
	case errors.Is(e.Err, syscall.EROFS):
		return fmt.Sprintf("%s %s is on a read-only file system (%v): the process writes its files there; mount it read-write, or give one that is", what, e.Dir, e.Err)
	case errors.Is(e.Err, syscall.ENOSPC), errors.Is(e.Err, syscall.EDQUOT):
		return fmt.Sprintf("%s %s cannot be written: its file system is full, or this user's quota on it (%v); free space there (df %s), or give a directory on another file system, then run this again",
			what, e.Dir, e.Err, e.Dir)
	case errors.Is(e.Err, syscall.ENOTDIR):
		return fmt.Sprintf("%s %s cannot be used: it, or a directory on its path, is a file, not a directory (%v); give the path of a directory (ls -ld %s shows what is there)",
			what, e.Dir, e.Err, e.Dir)
	case made:
		return fmt.Sprintf("%s %s cannot be made by this user (uid %d: %v): make it as the user the directory above it belongs to (root, under the packaged units), or run the command as that user",
			what, e.Dir, os.Geteuid(), e.Err)
	}
	return fmt.Sprintf("%s %s cannot be written by this user (uid %d: %v): run the command as the user the directory belongs to (root, or the service's user, under the packaged units)",
		what, e.Dir, os.Geteuid(), e.Err)
}

// NotWritable reports whether err is one of the file system's refusals
// NotWritableError explains: no permission, a read-only or full file system, a path
// through a file.
func NotWritable(err error) bool {
	for _, errno := range []syscall.Errno{syscall.EACCES, syscall.EPERM, syscall.EROFS, syscall.ENOSPC, syscall.EDQUOT, syscall.ENOTDIR} {
		if errors.Is(err, errno) {
			return true
		}
	}
	return false
}

// Is makes errors.Is(err, ErrNotWritable) hold.
func (e *NotWritableError) Is(target error) bool { return target == ErrNotWritable }

// Unwrap gives the open's error.
func (e *NotWritableError) Unwrap() error { return e.Err }

// Lock is a held directory lock.
type Lock struct {
	f *os.File
}

// record is the lock file's content.
type record struct {
	PID     int    `json:"pid"`
	Command string `json:"command"`
}

// Acquire takes the lock of dir (a what, for messages) for this process, recording
// its pid and command (say "meshctl serve") in the lock file, or refuses at once with
// an *InUseError naming the holder. The directory must exist (the error then matches
// fs.ErrNotExist); the lock file is created if needed. Release it, or exit.
func Acquire(what, dir, command string) (*Lock, error) {
	return acquire(what, dir, command, os.O_CREATE)
}

// AcquireExisting is Acquire for a command that changes nothing: it creates nothing,
// and when the directory or its lock file does not exist it returns a nil *Lock and
// no error, since no process holds a lock there.
func AcquireExisting(what, dir, command string) (*Lock, error) {
	l, err := acquire(what, dir, command, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return l, err
}

func acquire(what, dir, command string, create int) (*Lock, error) {
	path := filepath.Join(dir, File)
	f, err := os.OpenFile(path, os.O_RDWR|create|noFollow, 0o600)
	if NotWritable(err) {
		// ENOTDIR too: dir is a file (or behind one), which the open's own words,
		// "open the lock of …: not a directory", left to the reader to work out.
		return nil, &NotWritableError{What: what, Dir: dir, Err: err}
	}
	if errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.EISDIR) {
		kind := "a symbolic link"
		if errors.Is(err, syscall.EISDIR) {
			kind = "a directory"
		}
		return nil, &NotALockError{Path: path, Kind: kind}
	}
	if err != nil {
		return nil, fmt.Errorf("open the lock of %s: %w", dir, err)
	}
	held, err := tryLock(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if !held {
		e := &InUseError{What: what, Dir: dir, Asker: command}
		if r, ok := readRecord(f); ok {
			e.PID, e.Command = r.PID, r.Command
		}
		f.Close()
		return nil, e
	}
	data, _ := json.Marshal(record{PID: os.Getpid(), Command: command})
	if err := writeRecord(f, append(data, '\n')); err != nil {
		f.Close()
		if NotWritable(err) {
			// A full disk: said as one, as the open's refusals are.
			return nil, &NotWritableError{What: what, Dir: dir, Err: fmt.Errorf("record this process in %s: %w", path, err)}
		}
		return nil, fmt.Errorf("record this process in %s: %w", path, err)
	}
	return &Lock{f: f}, nil
}

// maxRecord bounds what is read of a lock file: a record is a pid and a command.
const maxRecord = 4096

// readRecord reads the holder's record from the lock file already open (never by
// its name again, which another process could have replaced meanwhile), at most
// maxRecord bytes of it. A file longer than that, or not a record, says nothing.
func readRecord(f *os.File) (record, bool) {
	data, err := io.ReadAll(io.NewSectionReader(f, 0, maxRecord+1))
	if err != nil || len(data) > maxRecord {
		return record{}, false
	}
	var r record
	if json.Unmarshal(bytes.TrimSpace(data), &r) != nil || r.PID <= 0 || len(r.Command) > 256 {
		return record{}, false
	}
	return r, true
}

// writeRecord replaces the lock file's content. A process refused meanwhile may read
// it empty or partial: it then reports the holder without a pid.
func writeRecord(f *os.File, data []byte) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.WriteAt(data, 0)
	return err
}

// Release gives the lock up. The lock file stays (see the package comment).
// Releasing a nil *Lock does nothing.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the last descriptor of the open file releases flock
	l.f = nil
	return err
}

// Probe reports whether another process holds dir's lock, for a command that only
// reads the directory (`meshctl check`): an *InUseError naming the holder when one
// does, nil when none does or there is no lock file. It creates and writes nothing,
// and holds nothing when it returns: the lock is tried shared and given up at once,
// so a holder that comes a moment later is not refused for it, and two readers never
// refuse each other.
func Probe(what, dir string) error {
	path := filepath.Join(dir, File)
	// Without waiting: a named pipe in the lock's place (a backup copy may come
	// from anywhere) held `meshctl check` until a writer came, for good (a review's
	// run); it is refused below as no lock file.
	f, err := os.OpenFile(path, os.O_RDONLY|noFollow|nonBlock, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.EISDIR) {
		kind := "a symbolic link"
		if errors.Is(err, syscall.EISDIR) {
			kind = "a directory"
		}
		return &NotALockError{Path: path, Kind: kind}
	}
	if err != nil {
		return fmt.Errorf("open the lock of %s: %w", dir, err)
	}
	defer f.Close() // gives the shared lock up
	if fi, err := f.Stat(); err == nil && !fi.Mode().IsRegular() {
		return &NotALockError{Path: path, Kind: readfile.Kind(fi.Mode())}
	}
	free, err := trySharedLock(f)
	if err != nil {
		return fmt.Errorf("lock %s: %w", path, err)
	}
	if free {
		return nil
	}
	e := &InUseError{What: what, Dir: dir}
	if r, ok := readRecord(f); ok {
		e.PID, e.Command = r.PID, r.Command
	}
	return e
}
