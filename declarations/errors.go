package declarations

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Callers branch on them with errors.Is; the concrete errors
// returned carry more detail (see the typed errors below) and Code maps any of
// them to the short, stable code a host puts in its status report.
var (
	// ErrMalformed means the bytes are not a well-formed envelope or payload.
	// Retrying the same bytes will not help.
	ErrMalformed = errors.New("declarations: malformed")

	// ErrTooLarge means the input exceeded MaxEnvelopeSize and was refused
	// before any parsing. It is also ErrMalformed.
	ErrTooLarge error = &tooLargeError{}

	// ErrUntrusted means no signature on the envelope was made by a key this
	// node trusts: the message did not come from the mesh this node joined.
	ErrUntrusted = errors.New("declarations: not signed by the mesh this node joined")

	// ErrUnprovenKey means a keyring lists a new key that did not sign it, so
	// nothing proves the control plane holds that key's private half.
	ErrUnprovenKey = errors.New("declarations: keyring adds a key that did not sign it")

	// ErrWrongAudience means a correctly signed message was addressed to
	// another node, another enrolment of this node, or another mesh. The two
	// errors below narrow it down, and match it too.
	ErrWrongAudience = errors.New("declarations: addressed to another node")

	// ErrWrongMesh means a correctly signed message was addressed to another
	// mesh. It also matches ErrWrongAudience.
	ErrWrongMesh = errors.New("declarations: addressed to another mesh")

	// ErrWrongEnrolment means a correctly signed message was addressed to this
	// node id under another node key: an earlier enrolment of the same id. It
	// also matches ErrWrongAudience.
	ErrWrongEnrolment = errors.New("declarations: addressed to another enrolment of this node")

	// ErrOldKeyring means a correctly signed declaration was issued under an
	// older keyring epoch than the one this node has accepted since: it was
	// signed before a rotation and is delivered again.
	ErrOldKeyring = errors.New("declarations: signed under an older keyring")

	// ErrRolledBack means a correctly signed message is older than what the
	// node already applied (declaration version or keyring epoch).
	ErrRolledBack = errors.New("declarations: rolled back")

	// ErrReplayed means a correctly signed message reuses a version (or
	// keyring epoch) already applied, with different content.
	ErrReplayed = errors.New("declarations: replayed")

	// ErrExpired means the declaration's validity window has passed.
	ErrExpired = errors.New("declarations: expired")

	// ErrNotYetValid means the declaration was issued in the future as seen
	// by this node's clock, beyond the allowed skew.
	ErrNotYetValid = errors.New("declarations: not yet valid")

	// ErrInvalidBody means the declaration's body breaks a body rule (see
	// Body.Validate).
	ErrInvalidBody = errors.New("declarations: invalid body")
)

// tooLargeError is the type of ErrTooLarge: a sentinel that also matches
// ErrMalformed, so a caller that only knows "malformed" still branches right.
type tooLargeError struct{}

func (*tooLargeError) Error() string { return "declarations: envelope too large" }

func (*tooLargeError) Is(target error) bool { return target == ErrMalformed }

// Code returns a short, stable code for err, meant for status reports and
// logs read by programs: "too_large", "malformed", "untrusted",
// "unproven_key", "wrong_audience", "rolled_back", "replayed", "expired",
// "not_yet_valid", "invalid_body", "wrong_mesh", "wrong_enrolment",
// "old_keyring"; "" for nil and "error" for anything else
// (such as a caller passing an unusable key).
func Code(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrTooLarge): // before ErrMalformed: it is both
		return "too_large"
	case errors.Is(err, ErrMalformed):
		return "malformed"
	case errors.Is(err, ErrUntrusted):
		return "untrusted"
	case errors.Is(err, ErrUnprovenKey):
		return "unproven_key"
	case errors.Is(err, ErrWrongMesh): // before ErrWrongAudience: it is both
		return "wrong_mesh"
	case errors.Is(err, ErrWrongEnrolment): // likewise
		return "wrong_enrolment"
	case errors.Is(err, ErrWrongAudience):
		return "wrong_audience"
	case errors.Is(err, ErrOldKeyring):
		return "old_keyring"
	case errors.Is(err, ErrRolledBack):
		return "rolled_back"
	case errors.Is(err, ErrReplayed):
		return "replayed"
	case errors.Is(err, ErrExpired):
		return "expired"
	case errors.Is(err, ErrNotYetValid):
		return "not_yet_valid"
	case errors.Is(err, ErrInvalidBody):
		return "invalid_body"
	default:
		return "error"
	}
}

// Codes lists every code Code returns for an error: what a host may report of an
// envelope it refused, for a reader that exports a figure per code (the control
// plane's mesh_nodes_errors) and must know them beforehand.
func Codes() []string {
	return []string{"too_large", "malformed", "untrusted", "unproven_key", "wrong_mesh", "wrong_enrolment", "wrong_audience",
		"old_keyring", "rolled_back", "replayed", "expired", "not_yet_valid", "invalid_body", "error"}
}

// MalformedError reports bytes that are not a well-formed envelope or
// payload. It matches ErrMalformed.
type MalformedError struct {
	// What names the part at fault: "envelope", "declaration", "keyring" or
	// "revocation".
	What string
	// Signed is true when the envelope carried a valid signature by a
	// trusted key and only its payload is malformed: the control plane
	// itself produced bad data, which is a bug to report, not an attack.
	Signed bool
	// Reason says what is wrong, for a person.
	Reason string
}

func (e *MalformedError) Error() string {
	if e.Signed {
		return fmt.Sprintf("declarations: %s payload is signed by a trusted key but malformed: %s (the control plane produced it; report this to the mesh operator)", e.What, e.Reason)
	}
	return fmt.Sprintf("declarations: malformed %s: %s", e.What, e.Reason)
}

// Is reports whether target is ErrMalformed.
func (e *MalformedError) Is(target error) bool { return target == ErrMalformed }

// AudienceError reports a correctly signed message addressed to another node,
// another enrolment of this node (another node key) or another mesh. It
// matches ErrWrongAudience, and ErrWrongMesh or ErrWrongEnrolment when that is
// the difference. For keyrings, which address a whole mesh, WantNode and
// GotNode are empty; keys are compared only when the message names one.
type AudienceError struct {
	WantMesh, WantNode, WantKey string // who this node is
	GotMesh, GotNode, GotKey    string // whom the message was addressed to
}

func (e *AudienceError) Error() string {
	switch {
	case e.WantNode == "" && e.GotNode == "":
		return fmt.Sprintf("declarations: addressed to mesh %q, but this node belongs to mesh %q; it was delivered to the wrong place and is ignored",
			clip(e.GotMesh, maxIDShown), e.WantMesh)
	case e.GotMesh == e.WantMesh && e.GotNode == e.WantNode && e.GotKey != e.WantKey:
		return fmt.Sprintf("declarations: addressed to node %q under the node key %s, but this node enrolled with the key %s: it was issued for an earlier enrolment of this node id and is ignored",
			e.WantNode, clip(e.GotKey, maxIDShown), e.WantKey)
	}
	return fmt.Sprintf("declarations: addressed to node %q of mesh %q, but this is node %q of mesh %q; it was delivered to the wrong place and is ignored",
		clip(e.GotNode, maxIDShown), clip(e.GotMesh, maxIDShown), e.WantNode, e.WantMesh)
}

// Is reports whether target is ErrWrongAudience, or the narrower error that
// names the difference.
func (e *AudienceError) Is(target error) bool {
	switch target {
	case ErrWrongAudience:
		return true
	case ErrWrongMesh:
		return e.GotMesh != e.WantMesh
	case ErrWrongEnrolment:
		return e.GotMesh == e.WantMesh && e.GotNode == e.WantNode && e.GotKey != e.WantKey
	}
	return false
}

// OldKeyringError reports a declaration signed under an older keyring epoch
// than the node has accepted. It matches ErrOldKeyring.
type OldKeyringError struct {
	Got, Current uint64 // the declaration's keyring epoch, the node's
	// Version is the declaration's: its signature verified, so the node may name it
	// in what it reports.
	Version uint64
	// BodyDigest is the declaration's body's digest: whether it is a copy of one
	// the node held (a sync's answer overtaken by a push) or another body.
	BodyDigest [32]byte
}

func (e *OldKeyringError) Error() string {
	return fmt.Sprintf("declarations: signed under keyring epoch %d, but this node has accepted epoch %d since: it was issued before a key rotation and is delivered again, so it is ignored",
		e.Got, e.Current)
}

// Is reports whether target is ErrOldKeyring.
func (e *OldKeyringError) Is(target error) bool { return target == ErrOldKeyring }

// VersionError reports a correctly signed message older than what the node
// already holds. It matches ErrRolledBack.
type VersionError struct {
	// What is "declaration version" or "keyring epoch".
	What string
	// Got is the version or epoch the message carries; Current is the one
	// the node already applied or accepted.
	Got, Current uint64
	// BodyDigest is a declaration's body's digest (zero for a keyring or a
	// membership): whether it is a copy of one the node held or another body.
	BodyDigest [32]byte
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("declarations: rolled back: %s %d is older than %d, which this node already holds; an old message was delivered again and is ignored",
		e.What, e.Got, e.Current)
}

// Is reports whether target is ErrRolledBack.
func (e *VersionError) Is(target error) bool { return target == ErrRolledBack }

// ReplayedError reports a correctly signed declaration whose version the node
// already applied with another body. It matches ErrReplayed. It carries the
// version so that the node can report which one it refused: the control plane
// shows that node as not converged on that version, whatever the count says.
type ReplayedError struct {
	Version uint64
}

func (e *ReplayedError) Error() string {
	return fmt.Sprintf("declarations: replayed: version %d was already applied with a different body; a change must come under a new version, so this one is refused", e.Version)
}

// Is reports whether target is ErrReplayed.
func (e *ReplayedError) Is(target error) bool { return target == ErrReplayed }

// ExpiredError reports a declaration whose validity window has passed, with
// the allowed skew already taken into account. It matches ErrExpired. Its text
// gives the issue time too: one issued about the validity before its expiry and
// refused on arrival tells a stamping clock behind (which stamped it into this
// node's past) from a copy that is merely old.
type ExpiredError struct {
	// Version is the declaration's, so that the node reports which one it
	// refused; 0 for another payload.
	Version   uint64
	IssuedAt  time.Time // from the declaration; zero: not known
	ExpiresAt time.Time // from the declaration
	Now       time.Time // this node's clock when it checked
}

// Ago is how long before Now the declaration expired.
func (e *ExpiredError) Ago() time.Duration { return e.Now.Sub(e.ExpiresAt) }

func (e *ExpiredError) Error() string {
	issued := ""
	if !e.IssuedAt.IsZero() {
		issued = fmt.Sprintf("issued %s ago at %s, ", e.Now.Sub(e.IssuedAt).Round(time.Second), e.IssuedAt.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("declarations: expired %s ago (%sexpires_at %s, this node's clock reads %s); the control plane re-signs declarations before they expire, "+
		"so it is unreachable, something is withholding newer ones, this node's clock is ahead, or the control plane's was behind when it stamped it",
		e.Ago().Round(time.Second), issued, e.ExpiresAt.UTC().Format(time.RFC3339), e.Now.UTC().Format(time.RFC3339))
}

// Is reports whether target is ErrExpired.
func (e *ExpiredError) Is(target error) bool { return target == ErrExpired }

// NotYetValidError reports a declaration issued more than Tolerance after Now,
// this node's clock: this node's clock is behind, or the one that stamped it ahead.
// It matches ErrNotYetValid.
type NotYetValidError struct {
	// Version is the declaration's, so that the node reports which one it refused.
	Version   uint64
	IssuedAt  time.Time // from the declaration
	Now       time.Time // this node's clock when it checked
	Tolerance time.Duration
}

func (e *NotYetValidError) Error() string {
	return fmt.Sprintf("%s: issued at %s, %s ahead of this node's clock (tolerance %s); check this node's clock, then the control nodes' (the leader's stamped it)",
		ErrNotYetValid, e.IssuedAt.UTC().Format(time.RFC3339), e.IssuedAt.Sub(e.Now).Round(time.Second), e.Tolerance)
}

// Is reports whether target is ErrNotYetValid.
func (e *NotYetValidError) Is(target error) bool { return target == ErrNotYetValid }

// BodyError reports which file of a body breaks which rule. It matches
// ErrInvalidBody.
type BodyError struct {
	// Index is the position of the file in Body.Files, or -1 when the fault
	// is not in one file (too many files, JSON that does not parse).
	Index int
	// Path is the file's path as declared (possibly invalid); empty when
	// Index is -1.
	Path string
	// Reason says what is wrong, for a person.
	Reason string
	// Version is the declaration's whose body this is, when its signature
	// verified (VerifyDeclaration); 0 for a body checked alone.
	Version uint64
}

func (e *BodyError) Error() string {
	switch {
	case e.Index < 0 && e.Path == "":
		return "declarations: invalid body: " + e.Reason
	case e.Index < 0:
		return fmt.Sprintf("declarations: invalid body: path %q: %s", clip(e.Path, maxPathShown), e.Reason)
	}
	return fmt.Sprintf("declarations: invalid body: file %d (path %q): %s", e.Index, clip(e.Path, maxPathShown), e.Reason)
}

// Is reports whether target is ErrInvalidBody.
func (e *BodyError) Is(target error) bool { return target == ErrInvalidBody }

// Bounds on how much of untrusted text an error message repeats, so a hostile
// input cannot make log lines arbitrarily long.
const (
	maxIDShown   = 80
	maxPathShown = 200
	maxTextShown = 200
)

// clip shortens s to at most n bytes, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
