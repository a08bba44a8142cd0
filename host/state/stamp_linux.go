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
	if !ok {
		return stamp{}, false
	}
	return stampOfStat(st)
}

// stampOfStat is stampOfInfo of what stat(2) says.
func stampOfStat(st *syscall.Stat_t) (stamp, bool) {
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return stamp{}, false
	}
	sec, nsec := st.Ctim.Unix()
	return stamp{dev: uint64(st.Dev), ino: uint64(st.Ino), ctimeSec: sec, ctimeNsec: nsec, size: st.Size}, true
}
