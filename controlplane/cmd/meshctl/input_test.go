package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestInputFilesThatAreNotFiles: what an operator names with --file or
// --token-file may be a pipe, read until its writer closes it (`--file
// <(generate)`); a device is refused without being read (/dev/zero used to be read
// to 1 MiB and called too large); a token file over the cap says a token is one
// line, not that a declaration cannot carry it.
func TestInputFilesThatAreNotFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "body.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("cannot make a FIFO here: %v", err)
	}
	go func() {
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		defer f.Close()
		f.Write([]byte(`{"files":[]}`))
	}()
	done := make(chan struct{})
	var code int
	var stderr string
	go func() {
		defer close(done)
		code, _, stderr = runCLI("declare", "--data", dir, "--node", "web-1", "--file", fifo)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("declare --file FIFO did not return within 30 s")
	}
	// The body was read whole: what fails is the empty data directory.
	if code != exitDataDir || strings.Contains(stderr, "fifo") {
		t.Fatalf("declare --file FIFO: exit %d: %s", code, stderr)
	}

	if _, err := os.Stat("/dev/zero"); err == nil {
		code, _, stderr := runCLI("declare", "--data", dir, "--node", "web-1", "--file", "/dev/zero")
		if code == exitOK || !strings.Contains(stderr, "/dev/zero is a character device, not a regular file") {
			t.Fatalf("declare --file /dev/zero: exit %d: %s", code, stderr)
		}
	}

	big := filepath.Join(dir, "token.txt")
	writeTestFile(t, big, strings.Repeat("x", 20<<10))
	code, _, stderr = runCLI("join", "--data", filepath.Join(dir, "new"), "--token-file", big)
	if code == exitOK || !strings.Contains(stderr, "a token is one line") || strings.Contains(stderr, "declaration") {
		t.Fatalf("join --token-file with 20 KiB: exit %d: %s", code, stderr)
	}
}
