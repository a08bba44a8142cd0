// Package state keeps what the host agent applied last, in <state>/applied.state,
// so that an agent that restarts never applies an older declaration after a newer
// one and knows which files it owns.
//
// The file holds two records and the newer whole one counts (record.go): a running
// agent writes each record over the older one in place and flushes it (Store), one
// write and one flush per applied declaration. Agents before this one kept the state
// as one JSON document in <state>/applied.json; it is read when applied.state is
// absent, and replaced by a marker that those agents refuse to read once the new
// file is written.
//
// A missing file means nothing has been applied yet. A file that exists but
// cannot be read, is truncated or is corrupt is an error the agent must stop
// on: carrying on would forget the applied version, and the next declaration
// the broker delivered, however old, would be accepted.
package state

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"mesh/host/internal/jsonfile"
)

const (
	// FileName is the applied state's file name inside the state directory.
	FileName = "applied.state"
	// LegacyFileName is where agents before the two-slot file kept the state, as
	// one JSON document.
	LegacyFileName = "applied.json"
	// FormatVersion is the layout version of the applied state's JSON object, in a
	// record of the state file or in the legacy file.
	FormatVersion = 1
	// MaxFileSize caps what Load reads. The file holds a keyring and the list
	// of managed paths; anything larger is not one of ours.
	MaxFileSize = 16 << 20
)

// Applied is what the agent applied last and what it owns.
type Applied struct {
	Format           int       `json:"format"` // FormatVersion
	HaveApplied      bool      `json:"have_applied"`
	Version          uint64    `json:"version"`
	BodyDigest       string    `json:"body_digest"` // hex SHA-256
	IssuedAt         time.Time `json:"issued_at"`
	ExpiresAt        time.Time `json:"expires_at"`
	KeyringEpoch     uint64    `json:"keyring_epoch"`
	Keyring          []byte    `json:"keyring,omitempty"` // the signed keyring envelope last accepted (raw JSON)
	Managed          []string  `json:"managed"`           // slash-separated paths, relative to the managed root, the agent wrote and owns, or is about to write (before the first declaration, too)
	LastError        string    `json:"last_error,omitempty"`
	LastErrorCode    string    `json:"last_error_code,omitempty"`
	LastErrorVersion uint64    `json:"last_error_version,omitempty"`
	// NextAttempt is when a declaration that failed to apply is tried again.
	NextAttempt time.Time `json:"next_attempt,omitzero"`
	// Brokers is the mesh's current broker list, from the signed membership the
	// agent accepted last (MembershipVersion); once there is one, the agent dials
	// these and not the identity's.
	Brokers           []string `json:"brokers,omitempty"`
	MembershipVersion uint64   `json:"membership_version,omitempty"`
	// HooksPending are the changed paths whose hooks have not run to the end yet:
	// the agent runs them when it starts, if it stopped before they did.
	HooksPending []string `json:"hooks_pending,omitempty"`
	// HooksFailed are the names of the hooks that failed when they last ran, and
	// whose paths stay in HooksPending until they run again and succeed.
	HooksFailed []string `json:"hooks_failed,omitempty"`
	// HooksCut: the paths owed to failed hooks were cut to what their
	// MESH_CHANGED carries (a hook failing for long while declarations changed
	// many paths). Until none is owed, every hook that runs is told some paths
	// were left out (MESH_CHANGED_OMITTED), however few it is given.
	HooksCut bool `json:"hooks_cut,omitempty"`
}

// Path returns the applied state's path in stateDir.
func Path(stateDir string) string { return filepath.Join(stateDir, FileName) }

// LegacyPath returns the path of the legacy applied state in stateDir.
func LegacyPath(stateDir string) string { return filepath.Join(stateDir, LegacyFileName) }

// Validate reports the first field that is inconsistent. When HaveApplied is
// false nothing has been applied, so the version, digest, times and managed
// list must be empty; when it is true the digest must be a SHA-256 and the
// validity window must not be inverted. A keyring, when present, must be JSON,
// and managed paths must be unique, slash-separated and relative.
func (a Applied) Validate() error { return a.validate(true) }

// validate is Validate, the keyring's JSON checked only if checkKeyring.
func (a Applied) validate(checkKeyring bool) error {
	if a.Format != FormatVersion {
		return invalid("format", "is %d; this agent reads version %d", a.Format, FormatVersion)
	}
	if a.HaveApplied {
		if b, err := hex.DecodeString(a.BodyDigest); err != nil || len(b) != 32 {
			return invalid("body_digest", "is not 64 hex digits (a SHA-256)")
		}
		if a.IssuedAt.IsZero() || a.ExpiresAt.IsZero() {
			return invalid("issued_at", "and expires_at must both be set once a declaration is applied")
		}
		if a.ExpiresAt.Before(a.IssuedAt) {
			return invalid("expires_at", "is before issued_at")
		}
	} else {
		if a.Version != 0 || a.BodyDigest != "" || !a.IssuedAt.IsZero() || !a.ExpiresAt.IsZero() {
			return invalid("have_applied", "is false but a declaration's version, digest or times are set")
		}
	}
	if checkKeyring && len(a.Keyring) != 0 && !json.Valid(a.Keyring) {
		return invalid("keyring", "is not a JSON document")
	}
	if len(a.Brokers) > 64 {
		return invalid("brokers", "lists %d addresses; a mesh has at most 64 brokers", len(a.Brokers))
	}
	for i, b := range a.Brokers {
		if _, err := netip.ParseAddrPort(b); err != nil {
			return invalid(fmt.Sprintf("brokers[%d]", i), "is %q, not ip:port", truncate(b, 100))
		}
	}
	for i, p := range a.HooksPending {
		if p == "." || !fs.ValidPath(p) {
			return invalid(fmt.Sprintf("hooks_pending[%d]", i), "is %q, not a clean relative path", truncate(p, 200))
		}
	}
	if len(a.HooksFailed) > 1024 {
		return invalid("hooks_failed", "lists %d hooks; a hooks file holds far fewer", len(a.HooksFailed))
	}
	for i, h := range a.HooksFailed {
		if h == "" {
			return invalid(fmt.Sprintf("hooks_failed[%d]", i), "is empty, not a hook's name")
		}
	}
	seen := make(map[string]bool, len(a.Managed))
	for i, p := range a.Managed {
		if p == "." || !fs.ValidPath(p) {
			return invalid(fmt.Sprintf("managed[%d]", i), "is %q, not a clean relative path", truncate(p, 200))
		}
		if seen[p] {
			return invalid(fmt.Sprintf("managed[%d]", i), "repeats %q", truncate(p, 200))
		}
		seen[p] = true
	}
	return nil
}

// Load reads the applied state in stateDir: the newest whole record of
// applied.state, or, if there is no such file, the legacy applied.json. Nothing at
// all gives a zero Applied and nil: nothing has been applied yet. A file that cannot
// be read gives *UnreadableError (ErrUnreadable), one that is empty or cut short
// *TruncatedError (ErrTruncated), and one that is readable but wrong *CorruptError
// (ErrCorrupt). The agent must refuse to run on any of those rather than forget what
// it applied.
func Load(stateDir string) (Applied, error) {
	a, _, err := load(stateDir, readRegular)
	return a, err
}

// Open reads the applied state in stateDir as Load does, and returns with it the
// Store the agent writes it with, which then knows the file as it was read: the
// agent's first save writes in place without reading the file again, and saves only
// in the directory found now (Store.Gone).
func Open(stateDir string) (Applied, *Store, error) {
	s := NewStore(stateDir)
	// The directory the agent starts with is the one it saves in (Store.Gone).
	s.home, _ = os.Stat(stateDir)
	before, ok := stampPath(Path(stateDir))
	a, sl, err := load(stateDir, readRegular)
	if err != nil {
		return Applied{}, nil, err
	}
	// Known only if nothing changed the file while it was read; else the first save
	// reads it again.
	if after, ok2 := stampPath(Path(stateDir)); sl != nil && ok && ok2 && before == after {
		sl.json = nil
		s.sl, s.stamp, s.known = *sl, after, true
	}
	return a, s, nil
}

// load reads the applied state, and the state file's slots when it came from one.
func load(stateDir string, read readFunc) (Applied, *slots, error) {
	path := Path(stateDir)
	data, err := read(path, MaxFileSize)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		a, err := loadLegacy(stateDir, read)
		return a, nil, err
	case errors.Is(err, errTooBig):
		return Applied{}, nil, &CorruptError{Path: path, Reason: fmt.Sprintf("it is larger than %d bytes, far more than this file ever holds", MaxFileSize)}
	case err != nil:
		return Applied{}, nil, &UnreadableError{Path: path, Err: err}
	}
	sl, fault := readSlots(data)
	switch {
	case fault == nil:
	case fault.truncated:
		return Applied{}, nil, &TruncatedError{Path: path, Size: len(data)}
	default:
		return Applied{}, nil, &CorruptError{Path: path, Reason: fault.corrupt}
	}
	var a Applied
	if err := jsonfile.DecodeBytes(sl.json, FormatVersion, &a, &a.Format); err != nil {
		// The record's digest matched: it was written this way, not cut by a crash.
		reason, unknown := "its newest record's JSON ends early", ""
		if f := (*jsonfile.Fault)(nil); errors.As(err, &f) && f.Corrupt != "" {
			reason, unknown = "its newest record: "+f.Corrupt, f.Unknown
		}
		return Applied{}, nil, &CorruptError{Path: path, Reason: reason, Unknown: unknown}
	}
	a, err = validated(path, a)
	if err != nil {
		return Applied{}, nil, err
	}
	return a, &sl, nil
}

// loadLegacy reads the legacy applied.json, there being no applied.state. The
// marker that replaced it means applied.state was there and is gone: that is not
// "nothing applied".
func loadLegacy(stateDir string, read readFunc) (Applied, error) {
	path := LegacyPath(stateDir)
	var a Applied
	if err := decodeFile(path, read, MaxFileSize, FormatVersion, &a, &a.Format); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Applied{}, nil
		}
		if isMarker(path, read) {
			return Applied{}, &CorruptError{Path: Path(stateDir),
				Reason: "it is missing, and " + LegacyFileName + " beside it says the applied state is kept there"}
		}
		return Applied{}, err
	}
	return validated(path, a)
}

// isMarker reports whether the file at path is the marker markLegacy writes.
func isMarker(path string, read readFunc) bool {
	data, err := read(path, int64(len(legacyMarker)))
	if err != nil {
		return false
	}
	var m struct {
		Format int    `json:"format"`
		State  string `json:"state"`
	}
	return json.Unmarshal(data, &m) == nil && m.Format == 2 && m.State == FileName
}

func validated(path string, a Applied) (Applied, error) {
	if err := a.Validate(); err != nil {
		var ie *InvalidError
		errors.As(err, &ie)
		return Applied{}, &CorruptError{Path: path, Reason: ie.Field + " " + ie.Reason}
	}
	return a, nil
}

// Save writes a into stateDir (created 0700 if missing, refused if unsafe: see
// statedir.Prepare) as a new applied.state, mode
// 0600, atomically (temp file, flush, rename, flush of the directory), and leaves the
// marker in applied.json. It is for one-off writes (enrolment, tests); a running
// agent uses a Store. A zero Format is taken as FormatVersion; an Applied that fails
// Validate is refused, so that Load can always read what Save wrote. A full disk
// gives an error matching syscall.ENOSPC, and the previous file is then intact.
func Save(stateDir string, a Applied) error {
	s := NewStore(stateDir)
	js, err := s.encode(a)
	if err != nil {
		return err
	}
	return s.create(js)
}

func invalid(field, format string, args ...any) error {
	return &InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}
