//go:build unix

package state

import (
	"os"
	"syscall"
)

// stampOf reads f's identity (device and inode), change time and size: a file
// replaced has another inode, and one written by anyone changes its change time.
func stampOf(f *os.File) (stamp, bool) {
	fi, err := f.Stat()
	if err != nil {
		return stamp{}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return stamp{}, false
	}
	sec, nsec := st.Ctim.Unix()
	return stamp{dev: uint64(st.Dev), ino: uint64(st.Ino), ctimeSec: sec, ctimeNsec: nsec, size: fi.Size()}, true
}
