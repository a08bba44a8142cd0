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
	"time"
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
	return fmt.Sprintf("%s is %s, not a regular file: nothing was read from it (ls -l %s shows what is there)",
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
	return RegularChecked(path, max, nil)
}

// RegularChecked is Regular with check, when set, called with the opened file's
// FileInfo before anything is read: the file judged is the file read.
func RegularChecked(path string, max int64, check func(fs.FileInfo) error) ([]byte, error) {
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
	if check != nil {
		if err := check(fi); err != nil {
			return nil, err
		}
	}
	return readCapped(f, path, max)
}

// ErrNoWriter: a named pipe (FIFO) given as a file stayed without anything written
// to it for the whole wait. See *NoWriterError.
var ErrNoWriter = errors.New("nothing was written to the named pipe")

// PipeWait is how long a command waits for what a FIFO named as its input (a
// body, a token) brings: long enough to start the writer by hand in another
// terminal, short enough that a FIFO nothing opens does not hold a script for good.
const PipeWait = time.Minute

// NoWriterError is a FIFO that nothing wrote to within Wait.
type NoWriterError struct {
	Path string
	Wait time.Duration
}

func (e *NoWriterError) Error() string {
	return fmt.Sprintf("%s is a named pipe (FIFO) and nothing was written to it within %v: start what writes to it first, or give a regular file", e.Path, e.Wait)
}

// Is reports whether target is ErrNoWriter.
func (e *NoWriterError) Is(target error) bool { return target == ErrNoWriter }

// Stream reads what a person names as input (a body file, a token file): a regular
// file as Regular reads it, or a pipe, so that `--file <(generate)` and
// `--file /dev/stdin` work. A pipe is read until its writer closes it, at most max
// bytes (ErrTooLarge past that), and for at most wait in all: a FIFO that nothing
// opens, or whose writer never finishes, is given up on (*NoWriterError,
// ErrNoWriter) instead of keeping the command waiting forever. A directory, a
// socket or a device is refused (*NotRegularError): /dev/zero never ends, and a
// terminal is read by the commands themselves, with its echo off.
func Stream(path string, max int64, wait time.Duration) ([]byte, error) {
	return StreamChecked(path, max, wait, nil)
}

// StreamChecked is Stream with check, when set, called with what the opened file is
// before anything is read: the file judged is the file read, whatever is put at
// path in between.
func StreamChecked(path string, max int64, wait time.Duration, check func(fs.FileInfo) error) ([]byte, error) {
	return StreamWaiting(path, max, wait, check, nil)
}

// WaitNotice is how long a pipe Stream reads may stay silent before
// StreamWaiting's waiting is called: a FIFO nothing writes to waits up to PipeWait,
// which without a word looks like a command that hangs.
const WaitNotice = time.Second

// StreamWaiting is StreamChecked that calls waiting, when set, once a pipe has
// brought nothing for WaitNotice: the caller says what it waits for.
func StreamWaiting(path string, max int64, wait time.Duration, check func(fs.FileInfo) error, waiting func()) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|openFlags, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if check != nil {
		if err := check(fi); err != nil {
			return nil, err
		}
	}
	switch m := fi.Mode(); {
	case m.IsRegular():
		return readCapped(f, path, max)
	case m&fs.ModeNamedPipe != 0:
	default:
		return nil, &NotRegularError{Path: path, Mode: m}
	}
	return readPipe(f, path, max, wait, waiting)
}

func readCapped(r io.Reader, path string, max int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s: %w of %d bytes", path, ErrTooLarge, max)
	}
	return data, nil
}

// readPipe reads a pipe opened without waiting for a writer. Until a first byte
// comes, an end of file only means that no writer is there yet: it is tried again
// until the wait is over.
func readPipe(f *os.File, path string, max int64, wait time.Duration, waiting func()) ([]byte, error) {
	deadline := time.Now().Add(wait)
	var stopNotice func()
	if waiting != nil {
		fired := make(chan struct{})
		t := time.AfterFunc(WaitNotice, func() { waiting(); close(fired) })
		stopped := false
		stopNotice = func() {
			if stopped {
				return
			}
			stopped = true
			if !t.Stop() {
				<-fired // being said: it ends before this read returns
			}
		}
		defer stopNotice()
	}
	// A pipe the runtime polls honours the deadline while a writer is there but
	// silent; where the runtime cannot poll it, the loop below still ends.
	_ = f.SetReadDeadline(deadline)
	var data []byte
	buf := make([]byte, 32<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 && stopNotice != nil {
			stopNotice() // something writes: nothing to wait for
		}
		data = append(data, buf[:n]...)
		if int64(len(data)) > max {
			return nil, fmt.Errorf("%s: %w of %d bytes", path, ErrTooLarge, max)
		}
		switch {
		case err == nil:
			continue
		case errors.Is(err, io.EOF) && len(data) > 0:
			return data, nil
		case errors.Is(err, io.EOF):
			if time.Now().After(deadline) {
				return nil, &NoWriterError{Path: path, Wait: wait}
			}
			time.Sleep(min(50*time.Millisecond, time.Until(deadline)+time.Millisecond))
		case errors.Is(err, os.ErrDeadlineExceeded):
			return nil, &NoWriterError{Path: path, Wait: wait}
		default:
			return nil, err
		}
	}
}

// OffersInput reports whether f (a command's stdin) is a regular file whose content,
// from where it is read next, looks like what isToken takes: what a token redirected
// with `< token.txt` arrives as, beside one in MESH_TOKEN. It is read at its offset
// without moving it (a script run as `bash < install.sh` is the next commands'
// stdin, and read on). A pipe is not read at all: a byte taken from it is taken from
// the script it may be (`curl … | bash`, a review); IsPipe says one is there.
func OffersInput(f *os.File, isToken func([]byte) bool) bool {
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 {
		return false
	}
	at, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return false
	}
	buf := make([]byte, 4096)
	n, _ := f.ReadAt(buf, at)
	return isToken(buf[:n])
}

// IsPipe reports whether f is a pipe or a socket.
func IsPipe(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&(fs.ModeNamedPipe|fs.ModeSocket) != 0
}
