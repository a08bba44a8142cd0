//go:build linux

package apply

import (
	"fmt"
	"io/fs"
	"syscall"
)

// dirID names the directory fi describes by its device (major:minor, as
// /proc/self/mountinfo and stat(1) show it) and inode: what tells a file system's
// root from the mount point below it, whose path is the same.
func dirID(fi fs.FileInfo) string {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	dev := uint64(st.Dev)
	major := (dev>>8)&0xfff | (dev>>32)&^0xfff
	minor := dev&0xff | (dev>>12)&^0xff
	return fmt.Sprintf("device %d:%d, inode %d", major, minor, st.Ino)
}
