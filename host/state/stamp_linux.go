//go:build linux

package state

import (
	"io/fs"
	"syscall"
)

// stampOfInfo is the stamp of a regular file: its device and inode, change time and
// size.
func stampOfInfo(fi fs.FileInfo) (stamp, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !fi.Mode().IsRegular() {
		return stamp{}, false
	}
	sec, nsec := st.Ctim.Unix()
	return stamp{dev: uint64(st.Dev), ino: uint64(st.Ino), ctimeSec: sec, ctimeNsec: nsec, size: fi.Size()}, true
}
