//go:build linux

package terminal

import (
	"os"
	"syscall"
	"unsafe"
)

// HideEcho stops the terminal on f from echoing what is typed or pasted into it,
// keeping line editing and the interrupt keys, and returns what puts the terminal
// back as it was. It fails when f is not a terminal.
func HideEcho(f *os.File) (restore func(), err error) {
	fd := f.Fd()
	var was syscall.Termios
	if err := ioctlTermios(fd, syscall.TCGETS, &was); err != nil {
		return nil, err
	}
	hidden := was
	hidden.Lflag &^= syscall.ECHO
	hidden.Lflag |= syscall.ICANON | syscall.ISIG
	hidden.Iflag |= syscall.ICRNL
	if err := ioctlTermios(fd, syscall.TCSETS, &hidden); err != nil {
		return nil, err
	}
	return func() { _ = ioctlTermios(fd, syscall.TCSETS, &was) }, nil
}

// Echoing reports whether the terminal on f echoes its input.
func Echoing(f *os.File) (bool, error) {
	var t syscall.Termios
	if err := ioctlTermios(f.Fd(), syscall.TCGETS, &t); err != nil {
		return false, err
	}
	return t.Lflag&syscall.ECHO != 0, nil
}

func ioctlTermios(fd, req uintptr, t *syscall.Termios) error {
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, req, uintptr(unsafe.Pointer(t))); errno != 0 {
		return errno
	}
	return nil
}
