//go:build linux

// Package ptytest opens pseudo-terminals for tests: a command reads from the slave
// as from a terminal, and the master shows what that terminal would display.
package ptytest

import (
	"bytes"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"mesh/host/terminal"
)

// Open opens a pseudo-terminal pair, closed when the test ends: the master is what
// a terminal emulator holds (it receives the echo), the slave is a command's stdin.
// It skips the test, saying why, where the system has no usable pseudo-terminals.
func Open(t testing.TB) (master, slave *os.File) {
	t.Helper()
	// Non-blocking, so that the master's reads take deadlines.
	fd, err := syscall.Open("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here (%v): what a terminal shows cannot be observed", err)
	}
	var unlock int32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); errno != 0 {
		syscall.Close(fd)
		t.Skipf("cannot unlock a pseudo-terminal here (%v): what a terminal shows cannot be observed", errno)
	}
	var n uint32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); errno != 0 {
		syscall.Close(fd)
		t.Skipf("cannot name a pseudo-terminal here (%v): what a terminal shows cannot be observed", errno)
	}
	// A file only after the ioctls: Fd would put it back in blocking mode.
	m := os.NewFile(uintptr(fd), "/dev/ptmx")
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Skipf("cannot open a pseudo-terminal's slave here (%v; is devpts mounted?): what a terminal shows cannot be observed", err)
	}
	t.Cleanup(func() { s.Close(); m.Close() })
	return m, s
}

// Shown reads what the terminal displays on master until it stays quiet for quiet.
func Shown(master *os.File, quiet time.Duration) string {
	var out bytes.Buffer
	buf := make([]byte, 4096)
	for {
		_ = master.SetReadDeadline(time.Now().Add(quiet))
		n, err := master.Read(buf)
		out.Write(buf[:n])
		if err != nil {
			return out.String()
		}
	}
}

// WaitEcho waits up to 5 s for the terminal on f to echo (on) or not, and fails the
// test if it does not come to that.
func WaitEcho(t testing.TB, f *os.File, on bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		now, err := terminal.Echoing(f)
		if err != nil {
			t.Fatal(err)
		}
		if now == on {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the terminal's echo is not %v after 5 s", on)
		}
	}
}

// Wait waits up to 10 s for the exit code a command running in a goroutine sends
// on code, and fails the test if none comes.
func Wait(t testing.TB, code <-chan int) int {
	t.Helper()
	select {
	case c := <-code:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("the command did not end within 10 s")
		return -1
	}
}
