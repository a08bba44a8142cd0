//go:build unix

package statedir

import (
	"io/fs"
	"syscall"
)

// openFlags: no symbolic link at the name, no waiting on a FIFO, never the
// agent's controlling terminal.
const openFlags = syscall.O_NOFOLLOW | syscall.O_NONBLOCK | syscall.O_NOCTTY

var errIsDir error = syscall.EISDIR

// owner returns a file's numeric owner.
func owner(fi fs.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return -1, false
	}
	return int(st.Uid), true
}
