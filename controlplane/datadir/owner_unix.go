//go:build unix

package datadir

import (
	"io/fs"
	"syscall"
)

// FileOwner returns a file's numeric owner, where files have one.
func FileOwner(fi fs.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return -1, false
	}
	return int(st.Uid), true
}

// FileGroup returns a file's numeric group, where files have one.
func FileGroup(fi fs.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return -1, false
	}
	return int(st.Gid), true
}
