//go:build linux

package apply

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// dirID names the directory fi describes by its device (major:minor, as
// /proc/self/mountinfo and stat(1) show it) and inode: what tells a file system's
// root from the mount point below it, whose path is the same.
func dirID(fi fs.FileInfo) string {
	dev, ino, ok := devIno(fi)
	if !ok {
		return ""
	}
	major := (dev>>8)&0xfff | (dev>>32)&^0xfff
	minor := dev&0xff | (dev>>12)&^0xff
	return fmt.Sprintf("device %d:%d, inode %d", major, minor, ino)
}

// devIno returns the device and inode of what fi describes: an os stat's, or a
// statInfo's.
func devIno(fi fs.FileInfo) (dev, ino uint64, ok bool) {
	switch st := fi.Sys().(type) {
	case *syscall.Stat_t:
		return uint64(st.Dev), uint64(st.Ino), true
	case *unix.Stat_t:
		return uint64(st.Dev), uint64(st.Ino), true
	}
	return 0, 0, false
}

// sameFile is os.SameFile for a statInfo too, which os does not know.
func sameFile(a, b fs.FileInfo) bool {
	da, ia, ok1 := devIno(a)
	db, ib, ok2 := devIno(b)
	if ok1 && ok2 {
		return da == db && ia == ib
	}
	return os.SameFile(a, b)
}
