//go:build unix

package apply

import (
	"errors"
	"io/fs"
	"syscall"

	"golang.org/x/sys/unix"
)

// owner returns a file's numeric owner and group.
func owner(fi fs.FileInfo) (uid, gid int) {
	switch st := fi.Sys().(type) {
	case *syscall.Stat_t:
		return int(st.Uid), int(st.Gid)
	case *unix.Stat_t: // a statInfo's (dir_linux.go)
		return int(st.Uid), int(st.Gid)
	}
	return -1, -1
}

func isNotEmpty(err error) bool {
	return errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST)
}
