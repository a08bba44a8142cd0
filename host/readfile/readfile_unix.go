//go:build unix

package readfile

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// openFlags: no waiting for a writer if a FIFO is at the name (O_NONBLOCK changes
// nothing for a regular file), and never the process's controlling terminal.
const openFlags = syscall.O_NONBLOCK | syscall.O_NOCTTY

// OffersInput reports whether f (a command's stdin) offers something to read: a
// regular file that is not empty, or a pipe or socket with data within wait. It is
// asked where a token could come from two places (MESH_TOKEN and stdin): `cat
// other-token | meshhost enrol` with a MESH_TOKEN set and forgotten enrolled the
// machine into MESH_TOKEN's mesh (a review). A pipe's byte read to find out is not
// put back: the caller refuses then. A pipe whose writer sends nothing (a
// provisioning tool's stdin) is no input after wait; a terminal or /dev/null none.
func OffersInput(f *os.File, wait time.Duration) bool {
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	switch {
	case fi.Mode().IsRegular():
		return fi.Size() > 0
	case fi.Mode()&(fs.ModeNamedPipe|fs.ModeSocket) == 0:
		return false
	}
	fds := []unix.PollFd{{Fd: int32(f.Fd()), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, int(wait/time.Millisecond))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n == 0 || fds[0].Revents&unix.POLLIN == 0 {
			return false
		}
		break
	}
	var b [1]byte
	n, _ := f.Read(b[:])
	return n > 0
}
