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
// (errRootMarkUntrusted). As root, the user.* mark an earlier agent wrote is
// removed: it is never read again, and left, it named a stale version to whoever
// looked (getfattr).
func markRoot(root string, euid int, m rootMarkValue) error {
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
	err = unix.Fsetxattr(fd, rootMarkAttr(euid), m.text(), 0)
	if errors.Is(err, unix.ENOTSUP) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("setting %s: %w", rootMarkAttr(euid), err)
	}
	if euid == 0 {
		// Absent (ENODATA), or a file system without user.* attributes: nothing
		// to remove. Any other failure leaves a mark nobody reads.
		_ = unix.Fremovexattr(fd, rootMarkUser)
	}
	return nil
}

// rootMark reads root's mark, and whether it has one this agent (running as euid)
// can read and trust.
func rootMark(root string, euid int) (rootMarkValue, bool) {
	fd, err := openRoot(root)
	if err != nil {
		return rootMarkValue{}, false
	}
	defer unix.Close(fd)
	if ok, err := trustedRoot(fd, euid); err != nil || !ok {
		return rootMarkValue{}, false
	}
	buf := make([]byte, 128)
	n, err := unix.Fgetxattr(fd, rootMarkAttr(euid), buf)
	if err != nil {
		return rootMarkValue{}, false
	}
	return parseRootMark(buf[:n])
}
