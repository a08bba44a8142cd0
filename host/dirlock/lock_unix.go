//go:build unix

package dirlock

import (
	"errors"
	"os"
	"syscall"
	"time"
)

// noFollow refuses a lock file that is a symbolic link: the lock is this directory's
// own file, never one elsewhere.
const noFollow = syscall.O_NOFOLLOW

// nonBlock opens a named pipe without waiting for a writer (Probe refuses it).
const nonBlock = syscall.O_NONBLOCK

// tryLock takes an exclusive flock on f without waiting: false means another open
// file (of this process or another) holds it.
func tryLock(f *os.File) (bool, error) {
	busy := 0
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, syscall.EWOULDBLOCK):
			// A reader's Probe holds the lock shared for the time of one system
			// call: a serve starting in that instant exited 8 naming the last
			// holder (a review's reading). A holder that stays is still one after
			// tryLockWaits; the refusal comes that much later.
			if busy++; busy > tryLockWaits {
				return false, nil
			}
			time.Sleep(tryLockPause)
		case errors.Is(err, syscall.EINTR):
			continue
		default:
			return false, err
		}
	}
}

// tryLockWaits and tryLockPause: how often, and how far apart, tryLock tries again
// a lock held at its first try, about 100 ms in all.
const (
	tryLockWaits = 5
	tryLockPause = 20 * time.Millisecond
)

// trySharedLock takes a shared flock on f without waiting (closing f gives it up):
// false means another open file holds the exclusive lock.
func trySharedLock(f *os.File) (bool, error) {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, syscall.EWOULDBLOCK):
			return false, nil
		case errors.Is(err, syscall.EINTR):
			continue
		default:
			return false, err
		}
	}
}
