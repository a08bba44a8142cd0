package link

import "syscall"

// tcpUserTimeout is TCP_USER_TIMEOUT (tcp(7), since Linux 2.6.37), which the
// syscall package does not name.
const tcpUserTimeout = 0x12

// setUserTimeout sets TCP_USER_TIMEOUT on the socket about to connect.
func setUserTimeout(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout, int(UserTimeout.Milliseconds()))
	}); err != nil {
		return err
	}
	return serr
}
