package identity

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Errors callers branch on with errors.Is. The typed errors below carry the
// details and match these sentinels.
var (
	// ErrNotEnrolled: no identity file exists. This is the ordinary state of a
	// machine that has never enrolled, not a fault. See *NotEnrolledError.
	ErrNotEnrolled = errors.New("identity: this machine has not enrolled")
	// ErrUnreadable: the file exists but cannot be read (permissions, a
	// directory in its place, an I/O error). See *UnreadableError.
	ErrUnreadable = errors.New("identity: file cannot be read")
	// ErrTruncated: the file is empty or its JSON ends early. See *TruncatedError.
	ErrTruncated = errors.New("identity: file is truncated")
	// ErrCorrupt: the file parses as far as it goes but is not a valid
	// identity. See *CorruptError.
	ErrCorrupt = errors.New("identity: file is corrupt")
	// ErrAlreadyEnrolled: a valid identity exists, and enrolling again would
	// give the machine a second one. See *EnrolledError.
	ErrAlreadyEnrolled = errors.New("identity: this machine is already enrolled")
	// ErrNoPending: no unfinished enrolment is recorded.
	ErrNoPending = errors.New("identity: no enrolment in progress")
	// ErrInvalid: an Identity or Pending value fails validation. See *InvalidError.
	ErrInvalid = errors.New("identity: invalid")
)

// advice is what a person should do about an identity or pending-enrolment
// file that exists but cannot be used. The two differ: an identity file is
// what the mesh believes this machine to be, so throwing it away strands the
// node; a pending file only holds a key the mesh may or may not have recorded.
func advice(pending bool, path string) string {
	if pending {
		return fmt.Sprintf("It records an enrolment that did not finish. Remove %s and run the enrolment again; "+
			"if the mesh answers that the token is already used, ask an operator for a new token "+
			"(and to revoke the half-enrolled node)", path)
	}
	return fmt.Sprintf("Do not enrol again over it: the mesh still believes the identity in this file. "+
		"Restore %s from a backup, or have an operator revoke this node on the control plane, "+
		"then %s", path, StartOver(filepath.Dir(path)))
}

// StartOver says how to give a machine a new identity once its node is revoked: the
// whole state directory goes, not identity.json alone, which left the node's applied
// declaration (its files' contents, secrets included) beside the next enrolment's
// identity. Every message that advises enrolling afresh says it in these words.
func StartOver(stateDir string) string {
	return fmt.Sprintf("remove the state directory %s (or move it away: it holds the node's applied declaration, secrets included; "+
		"a managed root inside it goes with it, so move that out first) and enrol with a new token", stateDir)
}

func what(pending bool) string {
	if pending {
		return "pending enrolment"
	}
	return "identity"
}

// NotEnrolledError reports a state directory that holds no identity file: a machine
// that has not enrolled, or whose enrolment did not finish (Pending: its pending key
// is there). It matches ErrNotEnrolled. Its text is said to a person as the answer
// of meshhost status, run or hooks retry, so it names what to run next, and carries
// no package prefix: meshhost names the command it comes from.
type NotEnrolledError struct {
	Path    string // the identity file that is not there
	Pending bool   // an enrolment was started in the directory and did not finish
	// NoDir: the state directory itself does not exist. A machine that never
	// enrolled, or a directory moved or removed under the agent that ran with it
	// (whose socket and lock went with it, so nothing is there to ask).
	NoDir bool
}

func (e *NotEnrolledError) Error() string {
	if e.NoDir {
		// "Enrol it first" alone is wrong advice for a machine whose directory
		// went away under a running agent: the node is enrolled, and its key is
		// in the directory, wherever it is now.
		dir := filepath.Dir(e.Path)
		return fmt.Sprintf("the state directory %s does not exist (so neither does %s): this machine has not enrolled, or the directory was moved or removed. "+
			"If an agent ran with this directory, move it back (a running agent takes it up again at its next heartbeat), or restore it from a backup and restart the agent "+
			"(docs/operations.md, \"A host fixed by hand\"). If this machine never enrolled (or --state is mistyped), enrol it with the token an operator minted for it (meshctl token): "+
			"meshhost enrol --state %s < token.txt",
			dir, e.Path, dir)
	}
	if e.Pending {
		// Whether the same token can finish it depends on how its last attempt
		// ended, which meshhost enrol said and no file records: both courses are
		// given. (enrol removes the pending file when the mesh refuses the token
		// for good.)
		return fmt.Sprintf("this machine has not enrolled (there is no %s): an enrolment was started here and did not finish (%s holds the key it presented). "+
			"If its last attempt could be retried (exit 7: no broker answered, no answer came, the mesh answered unavailable or internal, or its broker refused the login), "+
			"run meshhost enrol again with the same token to finish it: it presents the same key, which the mesh may have recorded. "+
			"If the mesh refused the token (exit 3: used, expired, unknown, cancelled; or exit 7, login_refused, again a minute later), ask the operator for a new token (meshctl token) and enrol with it; that replaces this key",
			e.Path, PendingFileName)
	}
	return fmt.Sprintf("this machine has not enrolled (there is no %s): enrol it first, with the token an operator minted for it (meshctl token): meshhost enrol --state %s < token.txt",
		e.Path, filepath.Dir(e.Path))
}

// Is reports whether target is ErrNotEnrolled.
func (e *NotEnrolledError) Is(target error) bool { return target == ErrNotEnrolled }

// UnreadableError reports a file that exists but could not be read: permission
// denied, a directory or device in its place, a dangling symbolic link, an I/O
// error. It matches ErrUnreadable and unwraps to the operating-system error.
type UnreadableError struct {
	Path    string
	Err     error
	pending bool
}

func (e *UnreadableError) Error() string {
	if errors.Is(e.Err, fs.ErrPermission) {
		// Most often meshhost run by hand as another user than the agent's (status
		// without sudo): the file is likely fine, and the advice for a damaged one
		// (restore it, or have the node revoked) must not come first.
		return fmt.Sprintf("identity: the %s file %s exists but this user (uid %d) may not read it: %v. "+
			"Run meshhost as the user the agent runs as (root under the packaged units, e.g. with sudo). "+
			"If that user may not read it either: %s",
			what(e.pending), e.Path, os.Geteuid(), e.Err, advice(e.pending, e.Path))
	}
	return fmt.Sprintf("identity: the %s file %s exists but cannot be read: %v. %s",
		what(e.pending), e.Path, e.Err, advice(e.pending, e.Path))
}

// Is reports whether target is ErrUnreadable.
func (e *UnreadableError) Is(target error) bool { return target == ErrUnreadable }

// Unwrap returns the operating-system error.
func (e *UnreadableError) Unwrap() error { return e.Err }

// TruncatedError reports a file that is empty or whose JSON ends before it is
// complete, as a copy interrupted or a disk that filled up would leave it. It
// matches ErrTruncated.
type TruncatedError struct {
	Path    string
	Size    int // bytes in the file
	pending bool
}

func (e *TruncatedError) Error() string {
	state := fmt.Sprintf("is truncated: it ends after %d bytes, before its content is complete", e.Size)
	if e.Size == 0 {
		state = "is truncated: it is empty"
	}
	return fmt.Sprintf("identity: the %s file %s %s. %s",
		what(e.pending), e.Path, state, advice(e.pending, e.Path))
}

// Is reports whether target is ErrTruncated.
func (e *TruncatedError) Is(target error) bool { return target == ErrTruncated }

// CorruptError reports a file that can be read but is not a valid identity:
// not JSON, trailing garbage, too big, an unknown format version, a seed that
// does not match its public key, a pin that does not match the CA. Reason says
// which; it never contains the seed. It matches ErrCorrupt.
type CorruptError struct {
	Path   string
	Reason string
	// Unknown is a member the file holds that this version does not know: most
	// likely a newer meshhost wrote it (see jsonfile.Fault).
	Unknown string
	pending bool
}

func (e *CorruptError) Error() string {
	if e.Unknown != "" {
		return fmt.Sprintf("identity: the %s file %s holds %q, a member this meshhost does not know: a newer meshhost wrote it, and the file is not damaged. "+
			"Run that meshhost again (meshhost version says which this one is). Only if no newer meshhost ever ran on this machine is the file damaged: %s",
			what(e.pending), e.Path, e.Unknown, advice(e.pending, e.Path))
	}
	return fmt.Sprintf("identity: the %s file %s is corrupt: %s. %s",
		what(e.pending), e.Path, e.Reason, advice(e.pending, e.Path))
}

// Is reports whether target is ErrCorrupt.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// EnrolledError reports that this machine already has a valid identity. Mesh
// and Node are empty when Save found a file in the way that it could not read.
// It matches ErrAlreadyEnrolled.
type EnrolledError struct {
	Path string
	Mesh string
	Node string
}

func (e *EnrolledError) Error() string {
	who := "an identity"
	if e.Node != "" {
		who = fmt.Sprintf("the identity of node %q in mesh %q", e.Node, e.Mesh)
	}
	return fmt.Sprintf("this machine is already enrolled: %s holds %s. "+
		"Enrolling again would give it a second identity. To move it to another mesh or node, "+
		"have an operator revoke it first, then %s", e.Path, who, StartOver(filepath.Dir(e.Path)))
}

// Is reports whether target is ErrAlreadyEnrolled.
func (e *EnrolledError) Is(target error) bool { return target == ErrAlreadyEnrolled }

// InvalidError reports the first field of an Identity or Pending that fails
// validation. Reason never contains the seed. It matches ErrInvalid.
type InvalidError struct {
	Field  string // the JSON name of the field
	Reason string
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("identity: %s %s", e.Field, e.Reason)
}

// Is reports whether target is ErrInvalid.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

// invalidReason words a validation error as a CorruptError's reason, without
// the package prefix the CorruptError already carries.
func invalidReason(err error) string {
	var ie *InvalidError
	if errors.As(err, &ie) {
		return ie.Field + " " + ie.Reason
	}
	return err.Error()
}
