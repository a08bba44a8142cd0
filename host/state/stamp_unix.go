//go:build unix

package state

import (
	"io/fs"
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
	return stampOfInfo(fi)
}

// stampPath is stampOf for the file at path, without opening it.
func stampPath(path string) (stamp, bool) {
	fi, err := os.Lstat(path)
	if err != nil {
		return stamp{}, false
	}
	return stampOfInfo(fi)
}

func stampOfInfo(fi fs.FileInfo) (stamp, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !fi.Mode().IsRegular() {
		return stamp{}, false
	}
	sec, nsec := st.Ctim.Unix()
	return stamp{dev: uint64(st.Dev), ino: uint64(st.Ino), ctimeSec: sec, ctimeNsec: nsec, size: fi.Size()}, true
}
