//go:build !unix

package state

import (
	"io/fs"
	"os"
)

// stampOf, where the inode and change time are not at hand, has only the size and
// modification time: a file rewritten by hand within the same clock tick, at the
// same size, goes unnoticed there.
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
	if !fi.Mode().IsRegular() {
		return stamp{}, false
	}
	mt := fi.ModTime()
	return stamp{ctimeSec: mt.Unix(), ctimeNsec: int64(mt.Nanosecond()), size: fi.Size()}, true
}
