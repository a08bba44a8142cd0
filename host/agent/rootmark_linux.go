package agent

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// errRootMarkUntrusted: the root is one whose user.* mark another user could set
// (userMarkTrusted), so none is written or read.
var errRootMarkUntrusted = errors.New("the managed root is not this user's, or group or others may write it without the sticky bit: they could set its mark too, so none is kept (run the agent as root, or chmod go-w the root)")

// openRoot opens root for its mark. A root given as a symbolic link to a directory
// is followed, as the applier does: statedir.CheckRoot judged the link's owner.
func openRoot(root string) (int, error) {
	return unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
}

// rootDir names root's directory itself for a system call on the path: a link
// there is followed, and anything but a directory fails (ENOTDIR), as openRoot
// does, without opening it. An agent running as root marks and reads its mark so,
// in one system call where opening the root cost three: it trusts any root's
// trusted.* mark, so it has nothing to look at on a descriptor.
func rootDir(root string) string { return root + "/." }

// trustedRoot reports whether the root open at fd keeps a mark only an agent
// running as euid could have set (rootmark.go): any root for root's agent
// (trusted.*), else userMarkTrusted.
func trustedRoot(fd, euid int) (bool, error) {
	if euid == 0 {
		return true, nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, err
	}
	return userMarkTrusted(int(st.Uid), euid, st.Mode&0o7777), nil
}

// markRoot records m on root (rootMarkAttr for euid). Best effort: a file system
// without such extended attributes (NFS for trusted.*, tmpfs before Linux 6.6 for
// user.*) keeps none, and the check then has only the state to go by, as before.
// A root whose user.* mark another user could set is not marked
// (errRootMarkUntrusted).
func markRoot(root string, euid int, m rootMarkValue) error {
	attr := rootMarkAttr(euid)
	var err error
	if euid == 0 {
		err = unix.Setxattr(rootDir(root), attr, m.text(), 0)
	} else {
		err = onTrustedRoot(root, euid, func(fd int) error { return unix.Fsetxattr(fd, attr, m.text(), 0) })
	}
	switch {
	case errors.Is(err, unix.ENOTSUP):
		return nil
	case errors.Is(err, errRootMarkUntrusted):
		return err
	case err != nil:
		return fmt.Errorf("setting %s: %w", attr, err)
	}
	return nil
}

// clearUserMark removes from root the user.* mark an earlier agent wrote, for an
// agent running as root: it is never read again, and left, it named a stale version
// to whoever looked (getfattr). Absent (ENODATA), or on a file system without user.*
// attributes, there is nothing to remove; any other failure leaves a mark nobody
// reads.
func clearUserMark(root string) { _ = unix.Removexattr(rootDir(root), rootMarkUser) }

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
	var err error
	if euid == 0 {
		n, err = unix.Getxattr(rootDir(root), rootMarkTrusted, buf)
	} else {
		err = onTrustedRoot(root, euid, func(fd int) (err error) {
			n, err = unix.Fgetxattr(fd, rootMarkUser, buf)
			return err
		})
	}
	if err != nil {
		return rootMarkValue{}, false
	}
	return parseRootMark(buf[:n])
}
