//go:build linux

package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// openPTY opens a pseudo-terminal pair: the master is what a terminal emulator
// holds (it receives the echo), the slave is the command's stdin.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	// Non-blocking, so that the master's reads take deadlines.
	fd, err := syscall.Open("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here (%v): the echo of a pasted token cannot be observed", err)
	}
	var unlock int32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); errno != 0 {
		t.Fatalf("unlockpt: %v", errno)
	}
	var n uint32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); errno != 0 {
		t.Fatalf("ptsname: %v", errno)
	}
	// Made a file after the ioctls: Fd would put it back in blocking mode.
	m := os.NewFile(uintptr(fd), "/dev/ptmx")
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); m.Close() })
	return m, s
}

func echoing(t *testing.T, f *os.File) bool {
	t.Helper()
	var tio syscall.Termios
	if err := termios(f.Fd(), syscall.TCGETS, &tio); err != nil {
		t.Fatal(err)
	}
	return tio.Lflag&syscall.ECHO != 0
}

// drain reads what the terminal shows until it stays quiet for a moment.
func drain(m *os.File) string {
	var out bytes.Buffer
	buf := make([]byte, 4096)
	for {
		_ = m.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		n, err := m.Read(buf)
		out.Write(buf[:n])
		if err != nil {
			return out.String()
		}
	}
}

// TestPastedTokenNotShown: a token pasted on a terminal is read with the echo off,
// so its secret stays out of the scrollback, a shared screen and a recorded session;
// the terminal echoes again afterwards, also when Ctrl-C ends the paste. The same
// paste with the echo left on (a terminal that cannot turn it off) shows the token,
// which is what the first case would see without the change.
func TestPastedTokenNotShown(t *testing.T) {
	secret := strings.Repeat("5e", 32)
	tok := "mesh1_demo_127.0.0.1:7300_" + strings.Repeat("ab", 32) + "_" + strings.Repeat("cd", 32) + "_web-1_worker_1900000000_" + secret + "_0badc0de"

	enrolFrom := func(t *testing.T, slave *os.File, hide bool) (chan int, *bytes.Buffer) {
		var stderr bytes.Buffer
		cio := &cliIO{stdin: slave, stdout: &bytes.Buffer{}, stderr: &stderr, getenv: func(string) string { return "" }, stdinIsTTY: true}
		if hide {
			cio.hideInput = func() (func(), error) { return hideInput(slave) }
		}
		code := make(chan int, 1)
		dir := t.TempDir()
		go func() { code <- run([]string{"enrol", "--state", dir}, cio) }()
		return code, &stderr
	}
	waitEcho := func(t *testing.T, slave *os.File, want bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); echoing(t, slave) != want; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the terminal's echo is not %v", want)
			}
		}
	}

	for _, hide := range []bool{true, false} {
		t.Run(fmt.Sprintf("hidden=%v", hide), func(t *testing.T) {
			master, slave := openPTY(t)
			if !echoing(t, slave) {
				t.Fatal("a new terminal does not echo")
			}
			code, stderr := enrolFrom(t, slave, hide)
			if hide {
				waitEcho(t, slave, false)
			} else {
				time.Sleep(100 * time.Millisecond)
			}
			if _, err := master.Write([]byte(tok + "\n")); err != nil {
				t.Fatal(err)
			}
			select {
			case c := <-code:
				// The checksum is wrong: refused as a token, after it was read.
				if c != exitToken {
					t.Fatalf("exit %d, want %d: %s", c, exitToken, stderr)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the token was not read")
			}
			shown := drain(master)
			if hide && strings.Contains(shown, secret[:16]) {
				t.Errorf("the terminal showed the pasted token: %q", shown)
			}
			if !hide && !strings.Contains(shown, secret[:16]) {
				t.Errorf("with the echo on, the terminal showed %q: this test cannot see an echo", shown)
			}
			if !echoing(t, slave) {
				t.Error("the terminal does not echo after the token was read")
			}
			if hide && !strings.Contains(stderr.String(), "not shown") {
				t.Errorf("the prompt does not say the paste is hidden: %q", stderr)
			}
		})
	}

	t.Run("interrupted", func(t *testing.T) {
		_, slave := openPTY(t)
		code, stderr := enrolFrom(t, slave, true)
		waitEcho(t, slave, false)
		if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		select {
		case c := <-code:
			if c != exitFailure || !strings.Contains(stderr.String(), "interrupted before a token was read") {
				t.Fatalf("exit %d: %s", c, stderr)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("an interrupt did not end the paste")
		}
		if !echoing(t, slave) {
			t.Error("the terminal was left without echo after an interrupt")
		}
	})
}
