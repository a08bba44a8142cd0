package identity

import (
	"errors"
	"io/fs"

	"mesh/host/internal/jsonfile"
)

// readFunc reads a whole file of at most max bytes (see jsonfile.ReadFunc); tests
// substitute it to produce faults root cannot provoke.
type readFunc = jsonfile.ReadFunc

// readRegular is the readFunc used outside tests.
func readRegular(path string, max int64) ([]byte, error) { return jsonfile.ReadRegular(path, max) }

// errTooBig is readFunc's error for a file over the limit.
var errTooBig = jsonfile.ErrTooBig

// decodeFile reads the file at path and decodes its single JSON object into v,
// insisting on format version want (format is v's field for it) and on no unknown
// fields. Its errors are the package's typed ones; absence is returned as
// fs.ErrNotExist for the caller to name. Validation of the decoded value is the
// caller's.
func decodeFile(path string, read readFunc, max int64, want int, pending bool, v any, format *int) error {
	err := jsonfile.Decode(path, read, max, want, v, format)
	var f *jsonfile.Fault
	switch {
	case err == nil, errors.Is(err, fs.ErrNotExist):
		return err
	case !errors.As(err, &f):
		return &UnreadableError{Path: path, Err: err, pending: pending}
	case f.Unreadable != nil:
		return &UnreadableError{Path: path, Err: f.Unreadable, pending: pending}
	case f.Truncated:
		return &TruncatedError{Path: path, Size: f.Size, pending: pending}
	}
	return &CorruptError{Path: path, Reason: f.Corrupt, Unknown: f.Unknown, pending: pending}
}

func truncate(s string, n int) string { return jsonfile.Truncate(s, n) }
