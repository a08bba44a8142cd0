package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestTokenFileThatIsNotAFile: --token-file may name a pipe, read until its writer
// closes it; a directory or a device is refused as what it is, before anything is
// read or made on disk (/dev/zero used to be read to the cap and called an
// oversized token; a directory gave "read: is a directory").
func TestTokenFileThatIsNotAFile(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, []byte(strings.Repeat("m", 20<<10)), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{
		dir: dir + " is a directory, not a regular file",
		big: "over 16384 bytes; a token is one line",
	}
	if _, err := os.Stat("/dev/zero"); err == nil {
		cases["/dev/zero"] = "/dev/zero is a character device, not a regular file"
	}
	fifo := filepath.Join(dir, "token.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err == nil {
		go func() {
			f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
			if err != nil {
				return
			}
			defer f.Close()
			f.Write([]byte("mesh1_demo_127.0.0.1:7300_ab"))
		}()
		cases[fifo] = "truncated" // read whole, then parsed
	}
	for file, want := range cases {
		state := filepath.Join(t.TempDir(), "state")
		done := make(chan struct{})
		var code int
		var stderr string
		go func() {
			defer close(done)
			code, _, stderr = runCLI("", nil, "enrol", "--state", state, "--token-file", file)
		}()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("--token-file %s: no answer within 30 s", file)
		}
		if code != exitToken || !strings.Contains(stderr, want) {
			t.Errorf("--token-file %s: exit %d, stderr %q; want %d and %q", file, code, stderr, exitToken, want)
		}
		if _, err := os.Stat(state); !os.IsNotExist(err) {
			t.Errorf("--token-file %s: the state directory was made (%v)", file, err)
		}
	}
}
