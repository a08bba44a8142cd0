//go:build unix

package dirlock

import (
	"errors"
	"os"
	"syscall"
)

// noFollow refuses a lock file that is a symbolic link: the lock is this directory's
// own file, never one elsewhere.
const noFollow = syscall.O_NOFOLLOW

// tryLock takes an exclusive flock on f without waiting: false means another open
// file (of this process or another) holds it.
func tryLock(f *os.File) (bool, error) {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
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
