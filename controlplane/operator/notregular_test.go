package operator

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/host/readfile"
)

// TestOperatorFilesThatAreNotFiles gives a FIFO, a directory and /dev/zero as the
// CA file, the credentials file and the NATS context. Each is refused at once with
// ErrEndpoint and readfile.ErrNotRegular naming what it is: a FIFO used to keep
// meshctl waiting for a writer forever, and /dev/zero was read to 1 MiB and called
// a file too large.
func TestOperatorFilesThatAreNotFiles(t *testing.T) {
	_, caFile := tlsBroker(t)
	creds := credsFile(t)
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("cannot make a FIFO here: %v", err)
	}
	t.Cleanup(func() {
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	others := map[string]string{fifo: "named pipe (FIFO)", dir: "a directory"}
	if _, err := os.Stat("/dev/zero"); err == nil {
		others["/dev/zero"] = "character device"
	}
	getenv := func(string) string { return "" }
	for path, says := range others {
		checks := map[string]func() error{
			"CA file":    func() error { _, err := CAEndpoint([]string{"127.0.0.1:1"}, creds, path); return err },
			"creds file": func() error { _, err := CAEndpoint([]string{"127.0.0.1:1"}, path, caFile); return err },
			"context": func() error {
				ctx := path
				if !strings.Contains(ctx, "/") {
					ctx = "./" + ctx
				}
				_, err := LoadContext(ctx, getenv)
				return err
			},
			"readSmall": func() error { _, err := readSmall(path); return err },
		}
		for name, check := range checks {
			done := make(chan error, 1)
			go func() { done <- check() }()
			var err error
			select {
			case err = <-done:
			case <-time.After(20 * time.Second):
				t.Fatalf("%s %s: no answer within 20 s", name, path)
			}
			if !errors.Is(err, readfile.ErrNotRegular) || errors.Is(err, ErrFileTooLarge) || !strings.Contains(err.Error(), says) {
				t.Errorf("%s as %s: %v, want readfile.ErrNotRegular saying %q", path, name, err, says)
			}
			if name != "readSmall" && !errors.Is(err, ErrEndpoint) {
				t.Errorf("%s as %s: %v, want ErrEndpoint", path, name, err)
			}
		}
	}
}
