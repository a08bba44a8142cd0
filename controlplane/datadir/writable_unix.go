//go:build unix

package datadir

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// CheckWritable reports, without creating or writing anything, whether this user
// could make the data directory and write in it: access(2) on the directory, or on
// the nearest directory above it that exists when it does not. Its failures are
// WriteFailed's (a read-only file system, a place this user may not write); for
// `bootstrap --dry-run`, which must say what the real run would, and change nothing.
func (d Dir) CheckWritable() error {
	p := filepath.Clean(string(d))
	for {
		_, err := os.Stat(p)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) || p == filepath.Dir(p) {
			return err
		}
		p = filepath.Dir(p)
	}
	if err := unix.Access(p, unix.W_OK|unix.X_OK); err != nil {
		return d.WriteFailed("", &fs.PathError{Op: "access", Path: p, Err: err})
	}
	return nil
}
