//go:build unix

package datadir

import (
	"io/fs"
	"syscall"
)

// fileOwner returns a file's numeric owner.
func fileOwner(fi fs.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return -1, false
	}
	return int(st.Uid), true
}
