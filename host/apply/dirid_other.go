//go:build !linux

package apply

import (
	"io/fs"
	"os"
)

// dirID is "" where the device and inode are not at hand: the message then says
// the directory is another one, without naming either.
func dirID(fs.FileInfo) string { return "" }

// sameFile is os.SameFile: every FileInfo here is os's.
func sameFile(a, b fs.FileInfo) bool { return os.SameFile(a, b) }
