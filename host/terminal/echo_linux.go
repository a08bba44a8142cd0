//go:build linux

package terminal

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// HideEcho stops the terminal on f from echoing what is typed or pasted into it,
// keeping line editing and the interrupt keys, and returns what puts the terminal
// back as it was. It fails when f is not a terminal.
//
// restore first discards the input the terminal holds beyond what was read (a
// paste past the bound on what is read, or what came after ReadHidden read it):
// it would otherwise reach the shell once the command ends, as a command, and its
// history.
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

// pasteRest reads what the terminal on f holds after the line just read, up to max
// bytes: the rest of a paste that held more than one line (a token a mail client or
// a terminal wrapped), which a read in canonical mode leaves queued, a line at a
// time, and the last part of it in the line editor until Enter. It turns the line
// editing off for as long as it reads, so that a last line without its newline is
// read too, and reads until nothing has come for quiet (a paste over a slow link
// arrives in pieces); the terminal's settings are put back before it returns. Any
// error ends it with what it read.
func pasteRest(f *os.File, quiet time.Duration, max int) (string, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return "", err
	}
	var got []byte
	cerr := rc.Control(func(ufd uintptr) {
		fd := int(ufd)
		was, e := unix.IoctlGetTermios(fd, unix.TCGETS)
		if e != nil {
			err = e
			return
		}
		raw := *was
		raw.Lflag &^= unix.ICANON
		raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 0, 0 // a read never waits: poll does
		if e := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); e != nil {
			err = e
			return
		}
		defer func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, was) }()
		buf := make([]byte, 4096)
		for len(got) < max {
			ready, e := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int(quiet/time.Millisecond))
			switch {
			case e == unix.EINTR:
				continue
			case e != nil:
				err = e
				return
			case ready == 0:
				return // quiet: the paste is over
			}
			n, e := unix.Read(fd, buf[:min(len(buf), max-len(got))])
			switch {
			case e == unix.EINTR || e == unix.EAGAIN:
				continue
			case e != nil:
				err = e
				return
			case n <= 0:
				return // hung up
			}
			got = append(got, buf[:n]...)
		}
	})
	if err == nil {
		err = cerr
	}
	return string(got), err
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
