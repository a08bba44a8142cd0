package datadir

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/host/readfile"
)

// TestReadsRefuseWhatIsNotAFile puts a FIFO, a directory and a link to /dev/zero
// where each file of a data directory belongs. Every read refuses it at once, with
// readfile.ErrNotRegular naming what is there: a FIFO used to keep the command
// waiting for a writer forever, and /dev/zero was read to the cap and called a
// file too large.
func TestReadsRefuseWhatIsNotAFile(t *testing.T) {
	for _, kind := range []struct {
		name, says string
		put        func(t *testing.T, path string)
	}{
		{"FIFO", "named pipe (FIFO)", func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Skipf("cannot make a FIFO here: %v", err)
			}
			t.Cleanup(func() { releaseFIFO(path) })
		}},
		{"directory", "a directory", func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}},
		{"device", "character device", func(t *testing.T, path string) {
			if _, err := os.Stat("/dev/zero"); err != nil {
				t.Skip("no /dev/zero here")
			}
			if err := os.Symlink("/dev/zero", path); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(kind.name, func(t *testing.T) {
			d := Dir(t.TempDir())
			for _, name := range []string{CACertFile, SigningKeyFile, AdminCredsFile, CurveKeyFile, ConfigFile, RemovedFile} {
				kind.put(t, d.Path(name))
			}
			checks := map[string]func() error{
				"ReadFile":        func() error { _, err := d.ReadFile(CACertFile); return err },
				"LoadSigningKeys": func() error { _, err := d.LoadSigningKeys(); return err },
				"LoadOperatorKey": func() error { _, err := d.LoadOperatorKey(); return err },
				"LoadCurveKey":    func() error { _, err := d.LoadCurveKey(); return err },
				"LoadConfig":      func() error { _, err := d.LoadConfig(); return err },
				"ReadConfigRaw":   func() error { _, err := d.ReadConfigRaw(); return err },
				"Removed":         func() error { _, _, err := d.Removed(); return err },
				"CheckNotRemoved": d.CheckNotRemoved,
			}
			for name, check := range checks {
				err := returnsWithin(t, check)
				if !errors.Is(err, readfile.ErrNotRegular) || !errors.Is(err, ErrNotAFile) || errors.Is(err, ErrTooLarge) || errors.Is(err, ErrNoConfig) ||
					!strings.Contains(err.Error(), kind.says) {
					t.Errorf("%s: %v, want readfile.ErrNotRegular saying %q", name, err, kind.says)
				}
			}
		})
	}
}

// returnsWithin runs f, failing the test if it does not return within 20 s.
func returnsWithin(t *testing.T, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("the read did not return within 20 s: it waits for a FIFO's writer")
		return nil
	}
}

// releaseFIFO opens the writing end of the FIFO at path, so that a reader left
// waiting by a failed test returns.
func releaseFIFO(path string) {
	if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
		f.Close()
	}
}
