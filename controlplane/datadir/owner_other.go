//go:build !unix

package datadir

import "io/fs"

// fileOwner: files have no numeric owner here.
func fileOwner(fs.FileInfo) (int, bool) { return -1, false }
