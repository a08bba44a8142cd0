package agent

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// errRootMarkUntrusted: the root is one whose mark another user could set
// (userMarkTrusted), so none is written or read.
var errRootMarkUntrusted = errors.New("the managed root is not this agent's user's, or group or others may write it without the sticky bit: they could set its mark too, so none is kept (chmod go-w the root, or give it to the agent's user)")

// openRoot opens root for its mark. A root given as a symbolic link to a directory
// is followed, as the applier does: statedir.CheckRoot judged the link's owner.
// O_DIRECTORY refuses anything else without opening it (ENOTDIR): a named pipe in
// the root's place does not hold the agent.
func openRoot(root string) (int, error) {
	return unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
}

// trustedRoot reports whether the root open at fd keeps a mark only an agent
// running as euid could have set (userMarkTrusted), judged on the descriptor the
// mark is then read or written on.
func trustedRoot(fd, euid int) (bool, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, err
	}
	return userMarkTrusted(int(st.Uid), euid, st.Mode&0o7777), nil
}

// markRoot records m on root (rootMarkAttr). Best effort: a file system without
// user extended attributes (tmpfs before Linux 6.6) keeps none, and the check then
// has only the state to go by, as before. A root whose mark another user could
// set is not marked (errRootMarkUntrusted).
func markRoot(root string, euid int, m rootMarkValue) error {
	err := onTrustedRoot(root, euid, func(fd int) error { return unix.Fsetxattr(fd, rootMarkAttr, m.text(), 0) })
	switch {
	case errors.Is(err, unix.ENOTSUP):
		return nil
	case errors.Is(err, errRootMarkUntrusted):
		return err
	case err != nil:
		return fmt.Errorf("setting %s: %w", rootMarkAttr, err)
	}
	return nil
}

// onTrustedRoot opens root and calls fn with its descriptor if the root keeps a
// mark only an agent running as euid could have set (trustedRoot), and fails
// with errRootMarkUntrusted if not.
func onTrustedRoot(root string, euid int, fn func(fd int) error) error {
	fd, err := openRoot(root)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	switch ok, err := trustedRoot(fd, euid); {
	case err != nil:
		return err
	case !ok:
		return errRootMarkUntrusted
	}
	return fn(fd)
}

// rootMark reads root's mark, and whether it has one this agent (running as euid)
// can read and trust.
func rootMark(root string, euid int) (rootMarkValue, bool) {
	buf := make([]byte, 128)
	var n int
	err := onTrustedRoot(root, euid, func(fd int) (err error) {
		n, err = unix.Fgetxattr(fd, rootMarkAttr, buf)
		return err
	})
	if err != nil {
		return rootMarkValue{}, false
	}
	return parseRootMark(buf[:n])
}
