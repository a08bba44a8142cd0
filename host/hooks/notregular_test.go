package hooks

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"mesh/host/readfile"
)

// TestLoadNamesAHooksFileThatIsNoRegularFile: a device, a FIFO, a directory or a
// link to a device given as the hooks file is refused as what it is, before its
// owner and mode are judged, and without waiting for a FIFO's writer. Before,
// /dev/zero (mode 0666) was told to fix its mode: a chmod of /dev/zero, as root,
// breaks it for the whole machine and leaves the mistake in place.
func TestLoadNamesAHooksFileThatIsNoRegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	os.Chmod(fifo, 0o666)
	sub := filepath.Join(dir, "dir")
	if err := os.Mkdir(sub, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(sub, 0o777)
	link := filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, kind string }{
		{"/dev/zero", "a character device"},
		{"/dev/null", "a character device"},
		{fifo, "a named pipe (FIFO)"},
		{sub, "a directory"},
		{link, "a character device"},
	} {
		if _, err := os.Stat(c.path); err != nil {
			t.Logf("%s: %v; skipped", c.path, err)
			continue
		}
		_, err := Load(c.path)
		if !errors.Is(err, ErrConfig) || !errors.Is(err, readfile.ErrNotRegular) {
			t.Errorf("%s: %v, want ErrConfig and readfile.ErrNotRegular", c.path, err)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, c.path+" is "+c.kind+", not a regular file") {
			t.Errorf("%s: %q does not say it is %s", c.path, msg, c.kind)
		}
		if strings.Contains(msg, "mode") || strings.Contains(msg, "chmod") || strings.Contains(msg, "owner") {
			t.Errorf("%s: %q advises on the mode or owner of what is no hooks file", c.path, msg)
		}
	}
}
