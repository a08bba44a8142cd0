//go:build linux

package main

import (
	"bytes"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/host/terminal"
	"mesh/host/terminal/ptytest"
)

// TestPastedControlTokenNotShown: `meshctl join` on a terminal reads the pasted
// control token as one line with the echo off (it admits a control node: its TLS
// key and the operator credentials), and leaves the terminal echoing, also after
// Ctrl-C (exit 9, interrupted). Before, it read the terminal to its end (Ctrl-D),
// showing the token.
func TestPastedControlTokenNotShown(t *testing.T) {
	secret := strings.Repeat("5e", 32)
	tok := "mesh1_demo_127.0.0.1:7300_" + secret
	joinFrom := func(t *testing.T, slave *os.File) (chan int, *bytes.Buffer) {
		var stderr bytes.Buffer
		cio := &cliIO{stdin: slave, stdout: &bytes.Buffer{}, stderr: &stderr, getenv: func(string) string { return "" }, stdinIsTTY: true,
			hideInput: func() (func(), error) { return terminal.HideEcho(slave) }}
		code := make(chan int, 1)
		dir := t.TempDir() + "/cp"
		go func() { code <- run([]string{"join", "--data", dir}, cio) }()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if on, err := terminal.Echoing(slave); err != nil || !on {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the echo was not turned off")
			}
		}
		return code, &stderr
	}
	exit := func(t *testing.T, code chan int) int {
		select {
		case c := <-code:
			return c
		case <-time.After(10 * time.Second):
			t.Fatal("meshctl join did not end")
			return -1
		}
	}

	t.Run("pasted", func(t *testing.T) {
		master, slave := ptytest.Open(t)
		code, stderr := joinFrom(t, slave)
		// One line is the token: no Ctrl-D needed.
		if _, err := master.Write([]byte(tok + "\n")); err != nil {
			t.Fatal(err)
		}
		if c := exit(t, code); c != exitRefused || !strings.Contains(stderr.String(), "truncated") {
			t.Fatalf("exit %d, want %d: %s", c, exitRefused, stderr)
		}
		if shown := ptytest.Shown(master, 300*time.Millisecond); strings.Contains(shown, secret[:16]) {
			t.Errorf("the terminal showed the pasted token: %q", shown)
		}
		if strings.Contains(stderr.String(), secret[:16]) {
			t.Errorf("stderr shows the token: %q", stderr)
		}
		if on, _ := terminal.Echoing(slave); !on {
			t.Error("the terminal does not echo after the token was read")
		}
	})
	t.Run("interrupted", func(t *testing.T) {
		_, slave := ptytest.Open(t)
		code, stderr := joinFrom(t, slave)
		if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		if c := exit(t, code); c != exitInterrupted || !strings.Contains(stderr.String(), "interrupted before the token was read") {
			t.Fatalf("exit %d: %s", c, stderr)
		}
		if on, _ := terminal.Echoing(slave); !on {
			t.Error("the terminal was left without echo after an interrupt")
		}
	})
}
