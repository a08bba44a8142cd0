//go:build unix

package broker

import "syscall"

// openFileLimit is the process's current open-file limit, 0 when it cannot be read or
// is unlimited.
func openFileLimit() uint64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil || uint64(l.Cur) == ^uint64(0) {
		return 0
	}
	return uint64(l.Cur)
}
