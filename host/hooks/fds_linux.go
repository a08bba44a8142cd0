//go:build linux

package hooks

import (
	"os"
	"strconv"
	"syscall"
)

// closeInherited marks every descriptor of the process beyond stdin, stdout and
// stderr close-on-exec. Go opens its own so already; one the agent inherited from
// whatever started it (a socket, a file its parent left open) would otherwise reach
// every hook, run as root.
func closeInherited() {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}
