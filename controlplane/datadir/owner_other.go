//go:build !unix

package datadir

import "io/fs"

// FileOwner: files have no numeric owner here.
func FileOwner(fs.FileInfo) (int, bool) { return -1, false }

// FileGroup: files have no numeric group here.
func FileGroup(fs.FileInfo) (int, bool) { return -1, false }
