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

	"mesh/host/terminal"
	"mesh/host/terminal/ptytest"
)

// TestPastedTokenNotShown: `meshhost enrol` on a terminal reads the pasted token with
// the echo off (its secret stays out of the scrollback, a shared screen and a
// recorded session), says so, and leaves the terminal echoing, also after Ctrl-C.
// The terminal package's own test has the control with the echo left on.
func TestPastedTokenNotShown(t *testing.T) {
	secret := strings.Repeat("5e", 32)
	// The checksum is wrong: refused as a token (exit 3), once it was read.
	tok := "mesh1_demo_127.0.0.1:7300_" + strings.Repeat("ab", 32) + "_" + strings.Repeat("cd", 32) + "_web-1_worker_1900000000_" + secret + "_0badc0de"
	enrolFrom := func(t *testing.T, slave *os.File) (chan int, *bytes.Buffer) {
		var stderr bytes.Buffer
		cio := &cliIO{stdin: slave, stdout: &bytes.Buffer{}, stderr: &stderr, getenv: func(string) string { return "" }, stdinIsTTY: true,
			hideInput: func() (func(), error) { return terminal.HideEcho(slave) }}
		code := make(chan int, 1)
		dir := t.TempDir()
		go func() { code <- run([]string{"enrol", "--state", dir}, cio) }()
		ptytest.WaitEcho(t, slave, false)
		return code, &stderr
	}

	t.Run("pasted", func(t *testing.T) {
		master, slave := ptytest.Open(t)
		code, stderr := enrolFrom(t, slave)
		if _, err := master.Write([]byte(tok + "\n")); err != nil {
			t.Fatal(err)
		}
		if c := ptytest.Wait(t, code); c != exitToken || !strings.Contains(stderr.String(), "checksum") {
			t.Fatalf("exit %d, want %d: %s", c, exitToken, stderr)
		}
		if shown := ptytest.Shown(master, 300*time.Millisecond); strings.Contains(shown, secret[:16]) {
			t.Errorf("the terminal showed the pasted token: %q", shown)
		}
		if !strings.Contains(stderr.String(), "(it is not shown)") {
			t.Errorf("the prompt does not say the paste is not shown: %q", stderr)
		}
		ptytest.WaitEcho(t, slave, true)
	})
	// A token a mail client wrapped, pasted as two lines (the second with or
	// without its newline): told it was split and to paste it as one line, as the
	// same text in a --token-file is. Only its first line was read before, and the
	// answer was "truncated ... copy the whole line again", which the same paste
	// got again (a security audit).
	for _, end := range []string{"\n", ""} {
		t.Run(fmt.Sprintf("wrapped, ending %q", end), func(t *testing.T) {
			good, goodSecret := realToken(t)
			master, slave := ptytest.Open(t)
			code, stderr := enrolFrom(t, slave)
			if _, err := master.Write([]byte(good[:150] + "\n" + good[150:] + end)); err != nil {
				t.Fatal(err)
			}
			if c := ptytest.Wait(t, code); c != exitToken || !strings.Contains(stderr.String(), "split when copied; paste it as one line") ||
				strings.Contains(stderr.String(), "truncated") {
				t.Fatalf("exit %d, want %d saying the token was split: %s", c, exitToken, stderr)
			}
			if shown := ptytest.Shown(master, 300*time.Millisecond); strings.Contains(shown, goodSecret[:16]) {
				t.Errorf("the terminal showed the pasted token: %q", shown)
			}
			ptytest.WaitEcho(t, slave, true)
		})
	}
	t.Run("interrupted", func(t *testing.T) {
		_, slave := ptytest.Open(t)
		code, stderr := enrolFrom(t, slave)
		if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		// Exit 9, as an enrolment interrupted later and meshctl join at its
		// prompt (it was 1, "another failure": a review).
		if c := ptytest.Wait(t, code); c != exitInterrupted || !strings.Contains(stderr.String(), "interrupted before the token was read") {
			t.Fatalf("exit %d: %s", c, stderr)
		}
		ptytest.WaitEcho(t, slave, true)
	})
}
