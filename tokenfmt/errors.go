package tokenfmt

import (
	"errors"
	"fmt"
	"time"
)

// Errors returned by Parse and Mint. Each kind asks for a different action, so
// callers branch on them with errors.Is; the texts are written for the person who
// pasted the token. No error ever contains the token text or its secret.
var (
	// ErrEmpty: nothing was pasted.
	ErrEmpty = errors.New("the token is empty: paste the whole line that meshctl token printed")
	// ErrTooLong: the input is longer than MaxEncodedLen, so it is not one token.
	ErrTooLong = errors.New("the input is too long to be a token: paste only the one line that meshctl token printed")
	// ErrNotToken: the text is not a mesh join token at all.
	ErrNotToken = errors.New("this is not a mesh join token: a token starts with mesh1_")
	// ErrUnsupportedVersion: a token of another format version; see VersionError.
	ErrUnsupportedVersion = errors.New("the token's format version is not supported by this program")
	// ErrTruncated: the token is cut short, usually by a partial copy.
	ErrTruncated = errors.New("the token is truncated: copy the whole line again")
	// ErrChecksum: the text does not match its checksum.
	ErrChecksum = errors.New("the token's checksum does not match: it was altered or mis-copied; copy the whole line again")
	// ErrMalformed: a field is not what the format allows; see FieldError.
	ErrMalformed = errors.New("a token field is malformed")
	// ErrExpired: the token's expiry has passed; see ExpiredError.
	ErrExpired = errors.New("the token has expired: mint a new one with meshctl token")
	// ErrTTL: Mint was asked for a lifetime outside (0, MaxTTL].
	ErrTTL = errors.New("the token lifetime is out of range")
	// ErrBadID: an id given outside a token cannot be a node id; see IDError.
	ErrBadID = errors.New("not a valid node id")
)

// IDError reports a node id, given outside a token, that cannot be one
// (CheckNodeID). Reason never quotes the id: a token pasted where an id belongs
// must not be echoed.
type IDError struct {
	Reason string
}

func (e *IDError) Error() string { return e.Reason }

// Is makes errors.Is(err, ErrBadID) true.
func (e *IDError) Is(target error) bool { return target == ErrBadID }

// VersionError reports a token of a format version this program does not speak.
type VersionError struct {
	Got int // the version the token declares
}

func (e *VersionError) Error() string {
	if e.Got < Version {
		return fmt.Sprintf("this token is format version %d, older than this program reads (version %d): mint a new one with meshctl token", e.Got, Version)
	}
	return fmt.Sprintf("this token is format version %d, newer than this program reads (version %d): upgrade meshctl", e.Got, Version)
}

// Is makes errors.Is(err, ErrUnsupportedVersion) true.
func (e *VersionError) Is(target error) bool { return target == ErrUnsupportedVersion }

// FieldError reports one field that the format does not allow. Reason says what is
// wrong without quoting the field, since the field may hold part of a secret.
type FieldError struct {
	Field  string // one of Fields()
	Reason string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("token field %s is malformed: %s", e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrMalformed) true.
func (e *FieldError) Is(target error) bool { return target == ErrMalformed }

// ExpiredError reports a token whose expiry is not after the time it was checked
// against. Parse returns it together with the parsed token.
type ExpiredError struct {
	Expiry time.Time // when the token expired
	Now    time.Time // the time it was checked against
}

// Ago returns how long before Now the token expired (zero if exactly at Now).
func (e *ExpiredError) Ago() time.Duration { return e.Now.Sub(e.Expiry) }

func (e *ExpiredError) Error() string {
	return fmt.Sprintf("the token expired %s ago (at %s); mint a new one with meshctl token",
		e.Ago().Round(time.Second), e.Expiry.UTC().Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrExpired) true.
func (e *ExpiredError) Is(target error) bool { return target == ErrExpired }

// detailError gives a sentinel a more specific text while errors.Is and errors.As
// still find the sentinel or typed error it wraps.
type detailError struct {
	kind error
	msg  string
}

func (e *detailError) Error() string { return e.msg }
func (e *detailError) Unwrap() error { return e.kind }

func detail(kind error, format string, args ...any) error {
	return &detailError{kind: kind, msg: fmt.Sprintf(format, args...)}
}
