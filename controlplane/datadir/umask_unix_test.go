//go:build unix

package datadir

import "syscall"

func syscallUmask(mask int) int { return syscall.Umask(mask) }
