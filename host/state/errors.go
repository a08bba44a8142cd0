package state

import (
	"errors"
	"fmt"
	"path/filepath"
)

// Errors callers branch on with errors.Is. A missing file is not an error.
var (
	// ErrUnreadable: the file exists but cannot be read. See *UnreadableError.
	ErrUnreadable = errors.New("state: applied state cannot be read")
	// ErrTruncated: the file is empty or its JSON ends early. See *TruncatedError.
	ErrTruncated = errors.New("state: applied state is truncated")
	// ErrCorrupt: the file is readable but not a valid applied state. See
	// *CorruptError.
	ErrCorrupt = errors.New("state: applied state is corrupt")
	// ErrInvalid: an Applied value fails validation. See *InvalidError.
	ErrInvalid = errors.New("state: invalid applied state")
	// ErrDirGone: the state directory a Store was opened in is no longer at its
	// path (removed, moved away, or replaced) and nothing was saved. See
	// *DirGoneError.
	ErrDirGone = errors.New("state: the state directory is gone")
)

// advice is what a person can do about an applied-state file the agent cannot
// use. Removing it is safe only with its consequence understood, so the
// message states the consequence.
func advice(path string) string {
	dir := filepath.Dir(path)
	return fmt.Sprintf("The agent will not run without knowing what it applied last, or it could apply an older declaration over a newer one. "+
		"Restore %s from a backup; or remove %s and %s, and the agent starts over from its enrolment: it trusts the signing key of its "+
		"token again, and any key retired since, and applies any declaration still valid until it has the mesh's current one "+
		"(files it managed before and that are no longer declared are left in place). Do that only if no retired signing key is "+
		"suspected of having leaked; otherwise enrol the machine again with a new token", path, Path(dir), LegacyPath(dir))
}

// UnreadableError reports a file that exists but could not be read. It matches
// ErrUnreadable and unwraps to the operating-system error.
type UnreadableError struct {
	Path string
	Err  error
}

func (e *UnreadableError) Error() string {
	return fmt.Sprintf("state: the applied state %s exists but cannot be read: %v. %s", e.Path, e.Err, advice(e.Path))
}

// Is reports whether target is ErrUnreadable.
func (e *UnreadableError) Is(target error) bool { return target == ErrUnreadable }

// Unwrap returns the operating-system error.
func (e *UnreadableError) Unwrap() error { return e.Err }

// TruncatedError reports a file that is empty or whose JSON ends early. It
// matches ErrTruncated.
type TruncatedError struct {
	Path string
	Size int // bytes in the file
}

func (e *TruncatedError) Error() string {
	state := fmt.Sprintf("is truncated: it ends after %d bytes, before its content is complete", e.Size)
	if e.Size == 0 {
		state = "is truncated: it is empty"
	}
	return fmt.Sprintf("state: the applied state %s %s. %s", e.Path, state, advice(e.Path))
}

// Is reports whether target is ErrTruncated.
func (e *TruncatedError) Is(target error) bool { return target == ErrTruncated }

// CorruptError reports a file that can be read but is not a valid applied
// state; Reason says why. It matches ErrCorrupt.
type CorruptError struct {
	Path   string
	Reason string
	// Unknown is a member the file holds that this version does not know: most
	// likely a newer meshhost wrote it (see jsonfile.Fault).
	Unknown string
}

func (e *CorruptError) Error() string {
	if e.Unknown != "" {
		return fmt.Sprintf("state: the applied state %s holds %q, a member this meshhost does not know: a newer meshhost wrote it, and the file is not damaged. "+
			"Run that meshhost again (meshhost version says which this one is); do not remove the file, or the agent starts over from its enrolment and trusts retired signing keys again. "+
			"Only if no newer meshhost ever ran on this machine is the file damaged: %s", e.Path, e.Unknown, advice(e.Path))
	}
	return fmt.Sprintf("state: the applied state %s is corrupt: %s. %s", e.Path, e.Reason, advice(e.Path))
}

// Is reports whether target is ErrCorrupt.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// InvalidError reports the first field of an Applied that fails validation. It
// matches ErrInvalid.
type InvalidError struct {
	Field  string // the JSON name of the field
	Reason string
}

func (e *InvalidError) Error() string { return fmt.Sprintf("state: %s %s", e.Field, e.Reason) }

// Is reports whether target is ErrInvalid.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

// DirGoneError reports a save refused because the state directory the agent
// started with is no longer at Dir: nothing is there (removed, or moved away), or
// Replaced, something else is (another directory, restored or made anew). The
// directory is not made again: a state directory holding applied.state alone is
// not enrolled, and the agent would not start from it. It matches ErrDirGone.
type DirGoneError struct {
	Dir      string
	Replaced bool
}

func (e *DirGoneError) Error() string {
	// What it means comes first: the mesh's table of nodes shows the start of it.
	if e.Replaced {
		return fmt.Sprintf("state: nothing is saved: the state directory %s was replaced while the agent ran (another directory, or something else, is at its path now), "+
			"which is not the directory whose identity.json this agent runs with and whose lock it holds, and another meshhost may use it. "+
			"If it is this agent's own directory restored, restart the agent, which takes it; if it holds no identity.json, this agent will not start again: "+
			"put the old directory back, or revoke the node (meshctl revoke) and enrol this machine again", e.Dir)
	}
	return fmt.Sprintf("state: this agent will not start again: the state directory %s was removed or moved away while it ran, and identity.json, the node's key, "+
		"with it, and so did the lock and the socket (meshhost status and hooks retry cannot reach the agent); the directory is not made again, and the agent "+
		"runs on from what it holds in memory, saving nothing. Put the directory back where it was (move it back, or restore it from a backup) "+
		"and restart the agent; or revoke the node (meshctl revoke) and enrol this machine again", e.Dir)
}

// Is reports whether target is ErrDirGone.
func (e *DirGoneError) Is(target error) bool { return target == ErrDirGone }
