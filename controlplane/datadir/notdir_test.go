package datadir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestADataDirectoryThatIsNotOne: a device, a regular file, a FIFO or a link to a
// device given as the data directory is refused by every way in (the checks of
// serve, bootstrap, join and an operator's --data, the lock, the reads of mesh.json
// and of its other files) as not a directory, naming what it is. /dev/zero was told
// "chmod 644 /dev/zero", and a regular file got a bare "open X/mesh.json: not a
// directory" (exit 1, where meshctl exits 7 for an unusable data directory).
func TestADataDirectoryThatIsNotOne(t *testing.T) {
	base := t.TempDir()
	file := filepath.Join(base, "afile")
	if err := os.WriteFile(file, []byte("notes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(base, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("cannot make a FIFO here: %v", err)
	}
	cases := []struct{ dir, says string }{
		{file, "it is a regular file"},
		{fifo, "it is a named pipe (FIFO)"},
	}
	if fi, err := os.Stat("/dev/zero"); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		link := filepath.Join(base, "zero")
		if err := os.Symlink("/dev/zero", link); err != nil {
			t.Fatal(err)
		}
		cases = append(cases,
			struct{ dir, says string }{"/dev/zero", "it is a character device"},
			struct{ dir, says string }{link, "it is a symbolic link to a character device"})
	}
	for _, c := range cases {
		d := Dir(c.dir)
		checks := map[string]func() error{
			"CheckPlace":       d.CheckPlace,
			"CheckPlaceToRead": d.CheckPlaceToRead,
			"CheckPrivate":     d.CheckPrivate,
			"CheckIsDir":       d.CheckIsDir,
			"Lock":             func() error { l, err := d.Lock("test"); l.Release(); return err },
			"LockExisting":     func() error { l, err := d.LockExisting("test"); l.Release(); return err },
			"LoadConfig":       func() error { _, err := d.LoadConfig(); return err },
			"ReadConfigRaw":    func() error { _, err := d.ReadConfigRaw(); return err },
			"ReadFile":         func() error { _, err := d.ReadFile(CACertFile); return err },
		}
		for name, check := range checks {
			err := check()
			var nd *NotADirectoryError
			if !errors.As(err, &nd) || !errors.Is(err, ErrNotADirectory) || !errors.Is(err, ErrNotAFile) {
				t.Errorf("%s of %s: %v, want a *NotADirectoryError", name, c.dir, err)
				continue
			}
			msg := err.Error()
			if !strings.Contains(msg, "is not a directory: "+c.says) || strings.Contains(msg, "chmod") || strings.Contains(msg, "open ") {
				t.Errorf("%s of %s: %q, want it to say %q and give no chmod", name, c.dir, msg, c.says)
			}
		}
	}
	// A data directory below a file: the part at fault is named.
	below := Dir(filepath.Join(file, "sub", "cp"))
	for name, check := range map[string]func() error{"CheckPlace": below.CheckPlace, "CheckPlaceToRead": below.CheckPlaceToRead, "CheckPrivate": below.CheckPrivate} {
		err := check()
		var nd *NotADirectoryError
		if !errors.As(err, &nd) || nd.Part != file || !strings.Contains(err.Error(), file+", on the way to it, is not a directory: it is a regular file") {
			t.Errorf("%s of %s: %v, want it to name %s as not a directory", name, below, err, file)
		}
	}
	if fi, err := os.Stat(file); err != nil || fi.Size() != 6 {
		t.Errorf("the file given as the data directory was changed: %v, %v", fi, err)
	}
	if err := Dir(filepath.Join(base, "new")).CheckIsDir(); err != nil {
		t.Errorf("a data directory not made yet: %v", err)
	}
}
