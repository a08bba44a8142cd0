//go:build !linux

package link

import "syscall"

// setUserTimeout does nothing where TCP_USER_TIMEOUT is not Linux's: keepalive and
// the pings remain.
func setUserTimeout(_, _ string, _ syscall.RawConn) error { return nil }
