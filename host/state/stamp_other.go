//go:build !linux

package state

import "io/fs"

// stampOfInfo, where the inode and change time are not at hand, has only the size
// and modification time: a file rewritten by hand within the same clock tick, at the
// same size, goes unnoticed there.
func stampOfInfo(fi fs.FileInfo) (stamp, bool) {
	if !fi.Mode().IsRegular() {
		return stamp{}, false
	}
	mt := fi.ModTime()
	return stamp{ctimeSec: mt.Unix(), ctimeNsec: int64(mt.Nanosecond()), size: fi.Size()}, true
}
