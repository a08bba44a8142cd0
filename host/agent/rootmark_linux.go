package agent

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// markRoot records version and digest on root (rootMarkAttr). Best effort: a file
// system without user extended attributes (tmpfs before Linux 6.6) keeps none,
// and the check then has only the state to go by, as before.
func markRoot(root string, version uint64, digest string) error {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	err = unix.Fsetxattr(fd, rootMarkAttr, fmt.Appendf(nil, "%d %s", version, digest), 0)
	if errors.Is(err, unix.ENOTSUP) {
		return nil
	}
	return err
}

// rootMark reads root's mark: the version last applied to it, and whether it has
// a mark this agent can read.
func rootMark(root string) (uint64, bool) {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, false
	}
	defer unix.Close(fd)
	buf := make([]byte, 128)
	n, err := unix.Fgetxattr(fd, rootMarkAttr, buf)
	if err != nil {
		return 0, false
	}
	v, _, ok := strings.Cut(string(buf[:n]), " ")
	if !ok {
		return 0, false
	}
	version, err := strconv.ParseUint(v, 10, 64)
	return version, err == nil
}
