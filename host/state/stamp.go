package state

import "os"

// stamp is what tells whether the state file is still as a Store left it: another
// inode means it was replaced, another change time or size that it was written.
type stamp struct {
	dev, ino            uint64
	ctimeSec, ctimeNsec int64
	size                int64
}

// stampPath reads the stamp of the file at path, without opening it.
func stampPath(path string) (stamp, bool) {
	fi, err := os.Lstat(path)
	if err != nil {
		return stamp{}, false
	}
	return stampOfInfo(fi)
}
