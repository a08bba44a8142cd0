package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"unicode/utf8"
)

// readFunc reads a whole file of at most max bytes. It returns an error
// matching fs.ErrNotExist only when nothing at all is at path, errTooBig when
// the file is longer than max, and any other error when something is there but
// cannot be read. Tests substitute it to produce faults root cannot provoke.
type readFunc func(path string, max int64) ([]byte, error)

var errTooBig = errors.New("file too big")

// readRegular is the readFunc used outside tests.
func readRegular(path string, max int64) ([]byte, error) {
	// Stat before opening: opening a FIFO put in the file's place would block
	// the agent forever instead of reporting it.
	fi, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if _, lerr := os.Lstat(path); lerr == nil {
				// A name is there, but it leads nowhere: that is not the
				// absence of the file, and must not be mistaken for it.
				return nil, &fs.PathError{Op: "open", Path: path,
					Err: errors.New("it is a symbolic link to a file that does not exist")}
			}
		}
		return nil, err
	}
	if fi.IsDir() {
		return nil, &fs.PathError{Op: "read", Path: path, Err: syscall.EISDIR}
	}
	if !fi.Mode().IsRegular() {
		return nil, &fs.PathError{Op: "read", Path: path,
			Err: fmt.Errorf("it is not a regular file (mode %v)", fi.Mode())}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, errTooBig
	}
	return data, nil
}

// The reading and classifying below is the same as host/identity's: each
// package keeps its own copy so that neither depends on the other.

// decodeFile reads the file at path and decodes its single JSON object into v,
// insisting on format version want and on no unknown fields. Its errors are the
// package's typed ones; absence is returned as fs.ErrNotExist for the caller to
// name. Validation of the decoded value is the caller's.
func decodeFile(path string, read readFunc, max int64, want int, v any) error {
	data, err := read(path, max)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fs.ErrNotExist
	case errors.Is(err, errTooBig):
		return &CorruptError{Path: path,
			Reason: fmt.Sprintf("it is larger than %d bytes, far more than this file ever holds", max)}
	case err != nil:
		return &UnreadableError{Path: path, Err: err}
	}
	raw, truncated, reason := singleJSONObject(data)
	if truncated {
		return &TruncatedError{Path: path, Size: len(data)}
	}
	if reason != "" {
		return &CorruptError{Path: path, Reason: reason}
	}
	if reason := checkFormat(raw, want); reason != "" {
		return &CorruptError{Path: path, Reason: reason}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &CorruptError{Path: path, Reason: jsonReason(err)}
	}
	return nil
}

// singleJSONObject finds the one JSON object data must hold. It tells a file
// that ends early (truncated: empty, cut mid-value, or zero-filled after the cut
// as some file systems leave a file after a crash) from one that is wrong
// (reason), so that neither reads like the other.
func singleJSONObject(data []byte) (raw json.RawMessage, truncated bool, reason string) {
	body := bytes.TrimRight(data, "\x00")
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&raw); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, true, ""
		}
		return nil, false, jsonReason(err)
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
		return jsonReason(err)
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

// jsonReason turns a decoding error into a reason that names the place and the
// kind of fault but never quotes the file's values at length.
func jsonReason(err error) string {
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
	return "it cannot be decoded: " + truncate(err.Error(), 120)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
