package state

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
	"time"
)

// appendApplied appends to b the JSON of a exactly as json.NewEncoder(w).Encode(a)
// writes it, less the newline Encode ends with: the fields in Applied's order, under
// the same omitempty and omitzero rules, the keyring in standard base64, a nil
// managed list as null, times as time.Time's MarshalJSON writes them, strings escaped
// as encoding/json escapes them (HTML-safe). Every save writes this, and
// encoding/json's reflection and garbage were a noticeable part of an agent's time
// per declaration.
//
// keyring64, when not nil, is a.Keyring in standard base64, which a Store keeps
// from one save to the next: the keyring is most of the state's bytes and changes
// only when the mesh's keys do.
//
// It reports false, with what it returns of no use, for a time MarshalJSON refuses
// (a year outside [0,9999], an offset of a day or more): the caller then leaves the
// whole value to encoding/json, which gives its own error. When it reports true,
// encoding/json would have written the same bytes; the tests and
// FuzzEncodeMatchesEncodingJSON hold it to that.
func appendApplied(b []byte, a *Applied, keyring64 []byte) ([]byte, bool) {
	e := encoder{b: b, ok: true}
	e.raw(`{"format":`)
	e.b = strconv.AppendInt(e.b, int64(a.Format), 10)
	e.raw(`,"have_applied":`)
	e.b = strconv.AppendBool(e.b, a.HaveApplied)
	e.raw(`,"version":`)
	e.b = strconv.AppendUint(e.b, a.Version, 10)
	e.raw(`,"body_digest":`)
	e.quoted(a.BodyDigest)
	e.raw(`,"issued_at":`)
	e.timestamp(a.IssuedAt)
	e.raw(`,"expires_at":`)
	e.timestamp(a.ExpiresAt)
	e.raw(`,"keyring_epoch":`)
	e.b = strconv.AppendUint(e.b, a.KeyringEpoch, 10)
	if len(a.Keyring) > 0 {
		e.raw(`,"keyring":"`)
		if keyring64 != nil {
			e.b = append(e.b, keyring64...)
		} else {
			e.b = base64.StdEncoding.AppendEncode(e.b, a.Keyring)
		}
		e.raw(`"`)
	}
	e.raw(`,"managed":`)
	e.list(a.Managed) // not omitempty: nil is null
	if a.LastError != "" {
		e.raw(`,"last_error":`)
		e.quoted(a.LastError)
	}
	if a.LastErrorCode != "" {
		e.raw(`,"last_error_code":`)
		e.quoted(a.LastErrorCode)
	}
	if a.LastErrorVersion != 0 {
		e.raw(`,"last_error_version":`)
		e.b = strconv.AppendUint(e.b, a.LastErrorVersion, 10)
	}
	// omitzero: encoding/json asks time.Time's IsZero, so the zero instant is left
	// out in whatever location it is given.
	if !a.NextAttempt.IsZero() {
		e.raw(`,"next_attempt":`)
		e.timestamp(a.NextAttempt)
	}
	if len(a.Brokers) > 0 {
		e.raw(`,"brokers":`)
		e.list(a.Brokers)
	}
	if a.MembershipVersion != 0 {
		e.raw(`,"membership_version":`)
		e.b = strconv.AppendUint(e.b, a.MembershipVersion, 10)
	}
	if len(a.HooksPending) > 0 {
		e.raw(`,"hooks_pending":`)
		e.list(a.HooksPending)
	}
	if len(a.HooksFailed) > 0 {
		e.raw(`,"hooks_failed":`)
		e.list(a.HooksFailed)
	}
	if a.HooksCut {
		e.raw(`,"hooks_cut":true`)
	}
	e.raw(`}`)
	return e.b, e.ok
}

// encoder is the JSON being appended, and whether it is still what encoding/json
// would write; once it is not, the rest is written for nothing.
type encoder struct {
	b  []byte
	ok bool
}

func (e *encoder) raw(s string) { e.b = append(e.b, s...) }

// timestamp appends t as time.Time's MarshalJSON writes it: AppendText writes the same
// RFC 3339 with nanoseconds, in t's own location, and refuses the same times.
func (e *encoder) timestamp(t time.Time) {
	e.b = append(e.b, '"')
	b, err := t.AppendText(e.b)
	if err != nil {
		e.ok = false
		return
	}
	e.b = append(b, '"')
}

// list appends ss as encoding/json writes a []string: null when nil.
func (e *encoder) list(ss []string) {
	if ss == nil {
		e.raw("null")
		return
	}
	e.raw("[")
	for i, s := range ss {
		if i > 0 {
			e.raw(",")
		}
		e.quoted(s)
	}
	e.raw("]")
}

// quoted appends s quoted as encoding/json writes it. The paths, digests and codes
// of a state are plain and copied as they are; a string that is not (an error
// message that quotes a path, a path with non-ASCII characters) is left to
// encoding/json, whose escapes (HTML-safe <, > and &, U+2028 and U+2029, U+FFFD for
// invalid UTF-8) are the same for a string alone as for one in a struct.
func (e *encoder) quoted(s string) {
	if jsonPlain(s) {
		e.b = append(e.b, '"')
		e.b = append(e.b, s...)
		e.b = append(e.b, '"')
		return
	}
	q, err := json.Marshal(s)
	if err != nil { // encoding/json writes every string; should it ever not, it decides
		e.ok = false
		return
	}
	e.b = append(e.b, q...)
}

// jsonPlain reports whether encoding/json writes s between quotes unchanged:
// printable ASCII without the characters it escapes (the quote, the backslash, and
// <, > and &, which it escapes for HTML). The check of declarations.jsonPlain, which
// host/state does not import for so little, by table: it runs over every path of
// every save.
func jsonPlain(s string) bool {
	for i := 0; i < len(s); i++ {
		if !plainByte[s[i]] {
			return false
		}
	}
	return true
}

// plainByte says which bytes jsonPlain lets through.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c <= 0x7e; c++ {
		switch c {
		case '"', '\\', '<', '>', '&':
		default:
			t[c] = true
		}
	}
	return t
}()
