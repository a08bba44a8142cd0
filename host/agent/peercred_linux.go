package agent

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
)

// ErrPeerNotAllowed is why the agent's socket closed a connection: its peer runs
// as a user other than the agent's, and not as root.
var ErrPeerNotAllowed = errors.New("the peer runs as another user than the agent's")

// peerAllowed admits a connection on the agent's socket only from the agent's own
// user or root, by the peer's credentials the kernel recorded at connect
// (SO_PEERCRED): the socket file's mode alone leaves a moment between its bind and
// its chmod, and the state directory may be one others can enter (0755 passes
// statedir's check).
func peerAllowed(c net.Conn) error {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("%w: not a Unix socket connection", ErrPeerNotAllowed)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *syscall.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if credErr != nil {
		return fmt.Errorf("read the peer's credentials: %w", credErr)
	}
	if euid := os.Geteuid(); cred.Uid != 0 && int(cred.Uid) != euid {
		return fmt.Errorf("%w: uid %d (pid %d); the agent runs as uid %d", ErrPeerNotAllowed, cred.Uid, cred.Pid, euid)
	}
	return nil
}
