package datadir

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// LockFile is the data directory's lock: one process at a time works on a data
// directory (`meshctl serve`, `bootstrap` or `join`). The lock is flock(2) on this
// file, so the kernel releases it when its holder exits, however it exits; the file
// itself stays, holding the pid of the last holder, and a file left by a process that
// is gone blocks nothing. It is never removed: removing it would let two processes
// lock two different files of the same name.
const LockFile = "lock"

// ErrInUse means another process holds the data directory's lock.
var ErrInUse = errors.New("data directory in use")

// InUseError says which process holds a data directory's lock. It matches ErrInUse.
type InUseError struct {
	Dir Dir
	// PID and Command are what the holder recorded in the lock file; PID is 0 when
	// it has not recorded them yet.
	PID     int
	Command string
}

func (e *InUseError) Error() string {
	who := "another process (it has not recorded its pid yet)"
	if e.PID > 0 {
		who = fmt.Sprintf("pid %d", e.PID)
		if e.Command != "" {
			who += " (" + e.Command + ")"
		}
	}
	return fmt.Sprintf("data directory %s is in use by %s: one process at a time works on a data directory; stop that process or wait for it to finish, then run this again",
		e.Dir, who)
}

// Is makes errors.Is(err, ErrInUse) hold.
func (e *InUseError) Is(target error) bool { return target == ErrInUse }

// Lock is a held data directory lock.
type Lock struct {
	f *os.File
}

// lockRecord is the lock file's content.
type lockRecord struct {
	PID     int    `json:"pid"`
	Command string `json:"command"`
}

// Lock takes the data directory's lock for this process, recording its pid and
// command (say "meshctl serve") in the lock file, or refuses at once with an
// *InUseError naming the holder. The directory must exist (the error then matches
// fs.ErrNotExist); the lock file is created if needed. Release it, or exit.
func (d Dir) Lock(command string) (*Lock, error) {
	return d.lock(command, os.O_CREATE)
}

// LockExisting is Lock for a command that changes nothing (`bootstrap --dry-run`):
// it creates nothing, and when the directory or its lock file does not exist it
// returns a nil *Lock and no error, since no process holds a lock there.
func (d Dir) LockExisting(command string) (*Lock, error) {
	l, err := d.lock(command, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return l, err
}

func (d Dir) lock(command string, create int) (*Lock, error) {
	path := d.Path(LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|create|noFollow, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the lock of %s: %w", d, err)
	}
	held, err := tryLock(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if !held {
		e := &InUseError{Dir: d}
		if data, err := os.ReadFile(path); err == nil {
			var r lockRecord
			if json.Unmarshal(bytes.TrimSpace(data), &r) == nil {
				e.PID, e.Command = r.PID, r.Command
			}
		}
		f.Close()
		return nil, e
	}
	data, _ := json.Marshal(lockRecord{PID: os.Getpid(), Command: command})
	if err := writeRecord(f, append(data, '\n')); err != nil {
		f.Close()
		return nil, fmt.Errorf("record this process in %s: %w", path, err)
	}
	return &Lock{f: f}, nil
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

// Release gives the lock up. The lock file stays (see LockFile). Releasing a nil
// *Lock does nothing.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the last descriptor of the open file releases flock
	l.f = nil
	return err
}
