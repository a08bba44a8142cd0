// Package readfile reads a small file whole, as the programs of the mesh read their
// own files (a data directory's, a credentials file, a CA file): bounded in size,
// and only if it is a regular file. Opening never waits: a named pipe (FIFO) put
// where a file belongs would otherwise keep the command waiting for a writer that
// never comes, and a device such as /dev/zero would be read up to the cap and
// reported as a file too large, which is not what is wrong.
//
// It uses the standard library only, so that the host agent may import it.
package readfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// Errors callers branch on with errors.Is.
var (
	// ErrTooLarge: the file holds more than the cap; no more than one byte past
	// the cap was read.
	ErrTooLarge = errors.New("larger than the cap")
	// ErrNotRegular: something other than a regular file is at the path (a
	// directory, a FIFO, a device, a socket); nothing was read. See
	// *NotRegularError.
	ErrNotRegular = errors.New("not a regular file")
)

// NotRegularError is a path where a regular file belongs but something else is.
type NotRegularError struct {
	Path string
	Mode fs.FileMode
}

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s is %s, not a regular file: nothing was read from it. Put the file itself there (ls -l %s shows what is there now)",
		e.Path, Kind(e.Mode), e.Path)
}

// Is reports whether target is ErrNotRegular.
func (e *NotRegularError) Is(target error) bool { return target == ErrNotRegular }

// Kind names the type of file mode m describes, for messages.
func Kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m.IsRegular():
		return "a regular file"
	}
	return fmt.Sprintf("a file of type %v", m.Type())
}

// Regular reads the regular file at path, following symbolic links, if it holds at
// most max bytes. Its errors: one matching fs.ErrNotExist when nothing is at path;
// *NotRegularError (ErrNotRegular) for anything but a regular file, decided on the
// open descriptor, so what is judged is what would be read; an error wrapping
// ErrTooLarge for a longer file, of which at most max+1 bytes were read (a file
// growing while it is read stops there too); the file system's errors otherwise.
func Regular(path string, max int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|openFlags, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &NotRegularError{Path: path, Mode: fi.Mode()}
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s: %w of %d bytes", path, ErrTooLarge, max)
	}
	return data, nil
}
