//go:build linux

package main

import (
	"os"
	"syscall"
	"unsafe"
)

// hideInput stops the terminal on f from echoing what is typed or pasted into it,
// keeping line editing and the interrupt keys, and returns what puts the terminal
// back as it was. It fails when f is not a terminal.
func hideInput(f *os.File) (restore func(), err error) {
	fd := f.Fd()
	var was syscall.Termios
	if err := termios(fd, syscall.TCGETS, &was); err != nil {
		return nil, err
	}
	hidden := was
	hidden.Lflag &^= syscall.ECHO
	hidden.Lflag |= syscall.ICANON | syscall.ISIG
	hidden.Iflag |= syscall.ICRNL
	if err := termios(fd, syscall.TCSETS, &hidden); err != nil {
		return nil, err
	}
	return func() { _ = termios(fd, syscall.TCSETS, &was) }, nil
}

func termios(fd uintptr, req uintptr, t *syscall.Termios) error {
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, req, uintptr(unsafe.Pointer(t))); errno != 0 {
		return errno
	}
	return nil
}
