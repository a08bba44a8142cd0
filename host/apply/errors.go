package apply

import (
	"errors"
	"fmt"
)

// Kinds of refusal; a *PathError matches exactly one of them.
var (
	// ErrEscapesRoot: the path could reach outside the managed root, or
	// through a symbolic link: absolute, "..", or a link on the way.
	ErrEscapesRoot = errors.New("apply: path escapes the managed root")
	// ErrInvalidPath: the path is malformed (empty, unclean, too long), or
	// something other than a regular file is where a file is declared, or a
	// file is where a directory is needed.
	ErrInvalidPath = errors.New("apply: invalid path")
	// ErrInvalidMode: the declared mode has bits other than permissions,
	// setuid, setgid and sticky.
	ErrInvalidMode = errors.New("apply: invalid file mode")
	// ErrUnreadableMode: an agent that is not root is asked for a file its
	// owner may not read, which it could not read back at the next apply.
	ErrUnreadableMode = errors.New("apply: file mode unreadable to the agent")
	// ErrUnknownOwner: the declared owner or group does not exist on this
	// machine.
	ErrUnknownOwner = errors.New("apply: unknown owner or group")
	// ErrTooLarge: a file is larger than MaxFileSize, the most a managed file
	// may hold: one found at a declared or previously managed path (the
	// applier would have to read it whole, to compare it and to restore it if
	// the apply fails), or one declared.
	ErrTooLarge = errors.New("apply: file too large")
)

// PathError is a refusal found before anything was written: nothing on disk
// has changed. Err is the kind (ErrEscapesRoot, ErrInvalidPath,
// ErrInvalidMode, ErrUnreadableMode, ErrUnknownOwner or ErrTooLarge) and Reason
// the detail.
type PathError struct {
	Path   string
	Reason string
	Err    error
}

func (e *PathError) Error() string {
	return fmt.Sprintf("apply: refusing %q: %s; nothing was changed", e.Path, e.Reason)
}

// Unwrap returns the kind of refusal.
func (e *PathError) Unwrap() error { return e.Err }

// ApplyError is a failure while writing or removing files. Path is the file
// being written or removed when it happened and Err the cause. RolledBack
// reports whether every change this Apply had made was undone, so the managed
// root is as it was before the call; if not, RollbackErr says what could not be
// restored.
type ApplyError struct {
	Path        string
	Err         error
	RolledBack  bool
	RollbackErr error
}

func (e *ApplyError) Error() string {
	if e.RolledBack {
		return fmt.Sprintf("apply: %s: %v; every change made before it was rolled back, the managed files are as they were", e.Path, e.Err)
	}
	return fmt.Sprintf("apply: %s: %v; rolling back also failed (%v), so the managed files may be a mixture of old and new", e.Path, e.Err, e.RollbackErr)
}

// Unwrap returns the cause, so errors.Is(err, syscall.ENOSPC) or
// errors.Is(err, context.Canceled) work through it.
func (e *ApplyError) Unwrap() error { return e.Err }
