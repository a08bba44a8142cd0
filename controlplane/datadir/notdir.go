package datadir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"mesh/host/readfile"
	"mesh/host/statedir"
)

// ErrNotADirectory means something other than a directory (a regular file, a FIFO,
// a device) is where the data directory belongs. See *NotADirectoryError.
var ErrNotADirectory = errors.New("the data directory is not a directory")

// NotADirectoryError is a data directory that is something else: Mode is what is at
// Dir, its links followed; Link says Dir itself is a symbolic link. It matches
// ErrNotADirectory, and ErrNotAFile too: the same mistake as a file of the data
// directory that is not a regular file (the wrong kind of entry where meshctl was
// pointed, refused before anything is read), which callers already refuse as a data
// directory that cannot be used.
type NotADirectoryError struct {
	Dir  string
	Mode fs.FileMode
	Link bool
	// Part, when set, is the path above Dir that is not a directory (Mode and Link
	// are then its): Dir cannot be made or reached through it.
	Part string
}

func (e *NotADirectoryError) Error() string {
	what := readfile.Kind(e.Mode)
	if e.Link {
		what = "a symbolic link to " + what
	}
	if e.Part != "" {
		return fmt.Sprintf("the data directory %s cannot be reached or made: %s, on the way to it, is not a directory: it is %s; nothing was read or written. "+
			"Check the --data path (ls -l %s shows what is there)", e.Dir, e.Part, what, e.Part)
	}
	return fmt.Sprintf("the data directory %s is not a directory: it is %s; nothing was read from it or written to it. "+
		"--data names the directory meshctl bootstrap or join made (the one holding %s), not a file in it (ls -l %s shows what is there)",
		e.Dir, what, ConfigFile, e.Dir)
}

// Is reports whether target is ErrNotADirectory or ErrNotAFile.
func (e *NotADirectoryError) Is(target error) bool {
	return target == ErrNotADirectory || target == ErrNotAFile
}

// CheckIsDir refuses a data directory that exists and is not a directory (its links
// followed) with a *NotADirectoryError. It is judged before its mode, its owner or
// anything in it: a device's mode is the machine's, not the data directory's, and
// the advice to chmod /dev/zero would break the machine. An absent directory passes,
// as does one that cannot be looked at (the caller's own access says why).
func (d Dir) CheckIsDir() error {
	fi, err := os.Stat(string(d))
	if errors.Is(err, syscall.ENOTDIR) {
		return d.partNotADirectory()
	}
	if err != nil || fi.IsDir() {
		return nil
	}
	return d.notADirectory(fi)
}

func (d Dir) notADirectory(fi fs.FileInfo) error {
	lfi, err := os.Lstat(string(d))
	return &NotADirectoryError{Dir: string(d), Mode: fi.Mode(), Link: err == nil && lfi.Mode()&fs.ModeSymlink != 0}
}

// partNotADirectory finds the path above the data directory that is not a
// directory, when looking at it failed with ENOTDIR ("stat X/sub: not a
// directory" named neither which part nor what to do).
func (d Dir) partNotADirectory() error {
	p, mode, ok := statedir.FileOnPath(string(d))
	if !ok {
		return nil
	}
	lfi, lerr := os.Lstat(p)
	return &NotADirectoryError{Dir: string(d), Part: p, Mode: mode, Link: lerr == nil && lfi.Mode()&fs.ModeSymlink != 0}
}

// inNotADirectory turns err, from opening a file in the directory, into a
// *NotADirectoryError when it failed because the data directory is not a directory
// (ENOTDIR): the bare "open X/mesh.json: not a directory" said neither which path
// was wrong nor what to do.
func (d Dir) inNotADirectory(err error) error {
	if !errors.Is(err, syscall.ENOTDIR) {
		return err
	}
	if derr := d.CheckIsDir(); derr != nil {
		return derr
	}
	return err
}
