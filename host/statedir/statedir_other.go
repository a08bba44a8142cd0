//go:build !unix

package statedir

import (
	"io/fs"
	"syscall"
)

// openFlags is 0 where open has no O_NOFOLLOW; Open then looks at the name after
// an open fails only, and a link is opened through.
const openFlags = 0

var errIsDir error = syscall.EISDIR

// owner: files have no numeric owner here.
func owner(fs.FileInfo) (int, bool) { return -1, false }
