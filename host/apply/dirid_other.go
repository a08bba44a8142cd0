//go:build !linux

package apply

import "io/fs"

// dirID is "" where the device and inode are not at hand: the message then says
// the directory is another one, without naming either.
func dirID(fs.FileInfo) string { return "" }
