//go:build linux

package terminal

import (
	"os"

	"golang.org/x/sys/unix"
)

// HideEcho stops the terminal on f from echoing what is typed or pasted into it,
// keeping line editing and the interrupt keys, and returns what puts the terminal
// back as it was. It fails when f is not a terminal.
//
// restore first discards the input the terminal holds beyond what was read: the
// second half of a token a mail client wrapped, or a line pasted with it, would
// otherwise reach the shell once the command ends, as a command, and its history.
func HideEcho(f *os.File) (restore func(), err error) {
	fd := int(f.Fd())
	was, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	hidden := *was
	hidden.Lflag &^= unix.ECHO
	hidden.Lflag |= unix.ICANON | unix.ISIG
	hidden.Iflag |= unix.ICRNL
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &hidden); err != nil {
		return nil, err
	}
	return func() {
		_ = unix.IoctlSetInt(fd, unix.TCFLSH, unix.TCIFLUSH)
		_ = unix.IoctlSetTermios(fd, unix.TCSETS, was)
	}, nil
}

// IsTerminal reports whether f is a terminal (not merely a character device, as
// /dev/null also is).
func IsTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// Echoing reports whether the terminal on f echoes its input.
func Echoing(f *os.File) (bool, error) {
	t, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	if err != nil {
		return false, err
	}
	return t.Lflag&unix.ECHO != 0, nil
}
