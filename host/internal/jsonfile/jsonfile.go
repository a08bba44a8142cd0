// Package jsonfile reads the host agent's small JSON state files and tells apart the
// ways they can be unusable: absent, unreadable, truncated, corrupt. The identity and
// the applied state both need exactly that distinction, because each calls for a
// different action and none may be mistaken for "absent".
package jsonfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"mesh/host/jsonkeys"
	"mesh/host/statedir"
)

// ReadFunc reads a whole file of at most max bytes. It returns an error matching
// fs.ErrNotExist only when nothing at all is at path, ErrTooBig when the file is
// longer than max, and any other error when something is there but cannot be read.
// Tests substitute it to produce faults root cannot provoke.
type ReadFunc func(path string, max int64) ([]byte, error)

// ErrTooBig is ReadFunc's error for a file over the limit.
var ErrTooBig = errors.New("file too big")

// ReadRegular is the ReadFunc used outside tests. It reads only a regular file that
// belongs to the agent's user, opened without following a symbolic link at its name
// (statedir.Open): a link or another user's file in the state directory is refused
// (statedir.ErrSymlink, statedir.ErrNotOwned), a dangling link included, which is
// never taken for the absence of the file.
func ReadRegular(path string, max int64) ([]byte, error) {
	f, _, err := statedir.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, ErrTooBig
	}
	return data, nil
}

// Fault is why a present file could not be decoded. Exactly one of its kinds is set.
type Fault struct {
	Unreadable error  // something is there but cannot be read
	Truncated  bool   // it ends before its content is complete (Size bytes)
	Size       int    // with Truncated
	Corrupt    string // it is whole but wrong: the reason, never quoting values
	// Unknown, with Corrupt, is a member the file holds that v has no field for:
	// the mark of a newer version of the agent, which added it, more often than of
	// damage. Rolled back, an agent called such a file corrupt and advised
	// removing it, which makes it trust retired signing keys again.
	Unknown string
}

func (f *Fault) Error() string {
	switch {
	case f.Unreadable != nil:
		return "unreadable: " + f.Unreadable.Error()
	case f.Truncated:
		return fmt.Sprintf("truncated after %d bytes", f.Size)
	}
	return "corrupt: " + f.Corrupt
}

// Decode reads the file at path and decodes its single JSON object into v, insisting
// on format version want and on no unknown fields. format points at v's field that
// the file's "format" member decodes into. It returns fs.ErrNotExist when nothing is
// at path, a *Fault when the file cannot be used, nil otherwise. Validation of the
// decoded value is the caller's.
func Decode(path string, read ReadFunc, max int64, want int, v any, format *int) error {
	data, err := read(path, max)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fs.ErrNotExist
	case errors.Is(err, ErrTooBig):
		return &Fault{Corrupt: fmt.Sprintf("it is larger than %d bytes, far more than this file ever holds", max)}
	case err != nil:
		return &Fault{Unreadable: err}
	}
	return DecodeBytes(data, want, v, format)
}

// DecodeBytes decodes data, a whole file's content, as Decode does: nil, or a *Fault
// saying why it cannot be used.
func DecodeBytes(data []byte, want int, v any, format *int) error {
	if decodeWhole(data, want, v, format) {
		return nil
	}
	// The file is not whole and right: start again from nothing, and find out why.
	reflect.ValueOf(v).Elem().SetZero()
	return examine(data, want, v)
}

// decodeWhole is the one pass that decodes a file that is whole and right, as nearly
// every file read is: one JSON object and nothing after it but white space, no
// unknown field, no member twice or in another case than its field's (which
// encoding/json would read, the last one winning), format version want. It reports false for any other file, leaving
// examine to tell why it cannot be used; examine accepts exactly what it accepts (a
// fuzz target compares them), at three passes over the file instead of one. An agent
// reads two such files each time it starts.
func decodeWhole(data []byte, want int, v any, format *int) bool {
	start := skipSpace(data, 0)
	if start == len(data) || data[start] != '{' {
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return false
	}
	return skipSpace(data, int(dec.InputOffset())) == len(data) && *format == want && jsonkeys.Check(data, v) == nil
}

// skipSpace returns the index of the first byte at or after i that is not JSON white
// space, or len(data).
func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// examine decodes data into v the slow way, each property in its own pass, so that
// a file that cannot be used gets the reason that fits it: truncated rather than
// corrupt, another format version rather than unknown fields.
func examine(data []byte, want int, v any) error {
	raw, truncated, reason := singleObject(data)
	if truncated {
		return &Fault{Truncated: true, Size: len(data)}
	}
	if reason != "" {
		return &Fault{Corrupt: reason}
	}
	// Before the format version, which is read ignoring case like every member:
	// two members "format", or one "Format", say another writer, not another
	// version of this agent.
	if err := jsonkeys.Check(raw, v); err != nil {
		return &Fault{Corrupt: "it cannot be decoded one way only: " + err.Error()}
	}
	if reason := checkFormat(raw, want); reason != "" {
		return &Fault{Corrupt: reason}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &Fault{Corrupt: Reason(err), Unknown: unknownMember(err)}
	}
	return nil
}

// unknownMember is the member an unknown-field error of encoding/json names, ""
// for any other error. encoding/json has no type for that error: its text, stable
// since Go 1.10, is all there is to read.
func unknownMember(err error) string {
	rest, ok := strings.CutPrefix(err.Error(), "json: unknown field ")
	if !ok {
		return ""
	}
	name, err := strconv.Unquote(rest)
	if err != nil {
		return ""
	}
	return Truncate(name, 64)
}

// singleObject finds the one JSON object data must hold. It tells a file
// that ends early (truncated: empty, cut mid-value, or zero-filled after the cut
// as some file systems leave a file after a crash) from one that is wrong
// (reason), so that neither reads like the other.
func singleObject(data []byte) (raw json.RawMessage, truncated bool, reason string) {
	body := bytes.TrimRight(data, "\x00")
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&raw); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, true, ""
		}
		return nil, false, Reason(err)
	}
	if len(body) != len(data) {
		return nil, false, "NUL bytes follow the JSON object"
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, false, fmt.Sprintf("unexpected data after the JSON object at byte %d", dec.InputOffset())
	}
	if raw[0] != '{' {
		return nil, false, "it holds a JSON value that is not an object"
	}
	return raw, false, ""
}

// checkFormat reads the format version before anything else, so that a file
// written by a newer agent is reported as such rather than as unknown fields.
func checkFormat(raw json.RawMessage, want int) string {
	var probe struct {
		Format json.RawMessage `json:"format"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil {
		return Reason(err)
	}
	if probe.Format == nil {
		return "it has no format version"
	}
	var got int
	if err := json.Unmarshal(probe.Format, &got); err != nil {
		return "its format version is not a whole number"
	}
	if got != want {
		return fmt.Sprintf("it has format version %d and this agent reads version %d (was it written by another version of meshhost?)", got, want)
	}
	return ""
}

// Reason turns a decoding error into a reason that names the place and the
// kind of fault but never quotes the file's values: they may be secrets (a seed).
func Reason(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("it is not valid JSON (at byte %d)", syn.Offset)
	case errors.As(err, &typ):
		if typ.Field == "" {
			return fmt.Sprintf("it holds a JSON %s where an object belongs", typ.Value)
		}
		return fmt.Sprintf("field %s holds a JSON %s where a %v belongs", typ.Field, typ.Value, typ.Type)
	}
	// The remaining decoding errors (an unknown field, a bad time, bad base64)
	// quote at most a field name or a timestamp; cap them all the same.
	return "it cannot be decoded: " + Truncate(err.Error(), 120)
}

// Truncate cuts s to at most n bytes on a rune boundary, marking the cut.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
