//go:build unix

package readfile

import "syscall"

// openFlags: no waiting for a writer if a FIFO is at the name (O_NONBLOCK changes
// nothing for a regular file), and never the process's controlling terminal.
const openFlags = syscall.O_NONBLOCK | syscall.O_NOCTTY
