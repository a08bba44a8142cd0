package token

import (
	"errors"
	"strconv"
	"time"
)

// The kinds of Parse error. Each calls for something different from the person at the
// machine, so callers tell them apart with errors.Is. No error carries token text.
var (
	ErrEmpty              = errors.New("no token given: paste the whole line the operator's meshctl token printed")
	ErrTooLong            = errors.New("the input is too long to be a join token: paste only the token line")
	ErrNotToken           = errors.New("this is not a mesh join token: a join token starts with mesh1_")
	ErrUnsupportedVersion = errors.New("this agent does not read this token format version")
	ErrTruncated          = errors.New("the token is truncated: copy the whole line again")
	ErrChecksum           = errors.New("the token does not match its checksum: it was altered or mis-copied; copy the whole line again")
	ErrMalformed          = errors.New("the token has a malformed field")
	ErrExpired            = errors.New("the token has expired: ask the operator for a new one (meshctl token)")
	// ErrBadBroker is ParseBroker's: not an address to dial a broker at.
	ErrBadBroker = errors.New("not a broker address to dial")
)

// VersionError is a token of a format version other than Version.
type VersionError struct {
	Got int // the version the token declares
}

func (e *VersionError) Error() string {
	got := strconv.Itoa(e.Got)
	if e.Got > Version {
		return "this token is format version " + got + ", newer than this agent reads (version " + strconv.Itoa(Version) + "): upgrade meshhost"
	}
	return "this token is format version " + got + ", older than this agent reads (version " + strconv.Itoa(Version) + "): ask the operator for a new one (meshctl token)"
}

// Is reports whether target is ErrUnsupportedVersion.
func (e *VersionError) Is(target error) bool { return target == ErrUnsupportedVersion }

// FieldError is a field that the format does not allow. Reason never quotes the
// field's text.
type FieldError struct {
	Field  string // one of Fields()
	Reason string
}

func (e *FieldError) Error() string {
	return "token field " + e.Field + " is malformed: " + e.Reason
}

// Is reports whether target is ErrMalformed.
func (e *FieldError) Is(target error) bool { return target == ErrMalformed }

// ExpiredError is a token whose expiry is not after the time it was checked at.
type ExpiredError struct {
	Expiry time.Time // when the token expired
	Now    time.Time // when it was checked
}

// Ago is how long before Now the token expired.
func (e *ExpiredError) Ago() time.Duration { return e.Now.Sub(e.Expiry) }

func (e *ExpiredError) Error() string {
	return "the token expired " + e.Ago().Round(time.Second).String() + " ago (at " +
		e.Expiry.UTC().Format(time.RFC3339) + "); ask the operator for a new one (meshctl token)"
}

// Is reports whether target is ErrExpired.
func (e *ExpiredError) Is(target error) bool { return target == ErrExpired }

// wrapped carries a more precise message for one of the sentinels or typed errors.
type wrapped struct {
	msg   string
	cause error
}

func (w *wrapped) Error() string { return w.msg }
func (w *wrapped) Unwrap() error { return w.cause }
