package state

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"syscall"

	"mesh/host/atomicfile"
	"mesh/host/statedir"
)

// Store writes the applied state of one state directory for an agent that runs. A
// Save opens the file, writes the new record over the older of its two slots and
// flushes it: one write and one data flush, where making the file anew costs a new
// file's blocks, two flushes and a rename on every applied declaration. Only a file
// that is absent, not whole, or too small for the record is made anew (a temp file,
// flushed, renamed over the old one, the directory flushed). The file is not held
// open between saves, so a Store costs no descriptor while the agent waits. A Store
// is the file's only writer: one meshhost runs per state directory (its lock).
type Store struct {
	dir string
	// home is the state directory as Open found it (nil for a Store NewStore
	// made): a save that finds another directory at dir, or none, is refused
	// (Gone), never made anew.
	home fs.FileInfo
	// known says sl and stamp describe the file as this Store last left it.
	known bool
	sl    slots
	stamp stamp
	buf   []byte // the record being written, reused
	enc   []byte // the JSON being encoded (appendApplied), reused
	// keyring is the keyring envelope last found to be JSON: it changes on a key
	// rotation, and checking it again on every save was a tenth of a save.
	keyring []byte
	// keyring64 is keyring in base64, as the JSON holds it: encoding it again on
	// every save was most of what remained of encoding the state.
	keyring64 []byte
}

// NewStore returns the Store of stateDir.
func NewStore(stateDir string) *Store { return &Store{dir: stateDir} }

// Save records a durably: when it returns nil, a crash cannot lose it. A zero Format
// is taken as FormatVersion; an Applied that fails Validate is refused, so that Load
// can always read what Save wrote. On an error the previous record is intact; a full
// disk gives an error matching syscall.ENOSPC.
//
// A file removed, replaced or rewritten by hand since the last Save (another inode,
// or another change time or size) is read again, or made anew if it is not whole,
// so that the agent's record is the one that counts; but only in the state
// directory Open found: that directory gone or replaced is a *DirGoneError (Gone),
// and nothing is made or written.
func (s *Store) Save(a Applied) error {
	js, err := s.encode(a)
	if err != nil {
		return err
	}
	f, err := openStoreFile(Path(s.dir))
	if err != nil {
		s.known = false
		if err := s.Gone(); err != nil {
			return err
		}
		return s.create(js)
	}
	defer f.close()
	if st, ok := f.stamp(); !ok || !s.known || st != s.stamp {
		// The file is not as this Store left it: the directory it is in may not
		// be either. A file as it was (the usual save) costs no look more.
		if err := s.Gone(); err != nil {
			return err
		}
		s.known = s.examine(f)
	}
	if !s.known || headerLen+len(js) > s.sl.size {
		return s.create(js)
	}
	return s.overwrite(f, js)
}

// Gone refuses, as a *DirGoneError (ErrDirGone), a state directory that is no
// longer the one Open found at its path; nil while it is, and for a Store NewStore
// made. Removed or moved away while the agent ran (rm -rf /var/lib/meshhost to
// "reset" a machine, a clean-up script), a save made it anew (statedir.Prepare) with
// applied.state alone, which no agent starts from, and said nothing; replaced, a
// save would write this agent's record into a directory it does not hold locked,
// which another meshhost may have enrolled in since. Save asks whenever the file
// is not as it left it; the agent asks at each heartbeat too (one stat), so that a
// directory removed is said within one, not at the next change saved.
func (s *Store) Gone() error {
	if s.home == nil {
		return nil
	}
	now, err := os.Stat(s.dir)
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
		return &DirGoneError{Dir: s.dir}
	case err != nil:
		return nil // not known gone: the save says what is wrong, if anything
	case !os.SameFile(now, s.home):
		return &DirGoneError{Dir: s.dir, Replaced: true}
	}
	return nil
}

// encode validates a and returns its JSON, the bytes encoding/json writes for it
// (appendApplied), in a buffer the next encode reuses.
func (s *Store) encode(a Applied) ([]byte, error) {
	if a.Format == 0 {
		a.Format = FormatVersion
	}
	keyringChecked := len(a.Keyring) > 0 && bytes.Equal(a.Keyring, s.keyring)
	if err := a.validate(!keyringChecked); err != nil {
		return nil, fmt.Errorf("state: refusing to save an invalid applied state: %w", err)
	}
	if !keyringChecked && len(a.Keyring) > 0 {
		s.keyring = bytes.Clone(a.Keyring)
		s.keyring64 = base64.StdEncoding.AppendEncode(s.keyring64[:0], a.Keyring)
	}
	var keyring64 []byte
	if len(a.Keyring) > 0 {
		keyring64 = s.keyring64 // a.Keyring is s.keyring, in either case above
	}
	js, ok := appendApplied(s.enc[:0], &a, keyring64)
	if ok {
		s.enc = js
	} else {
		// appendApplied gave up (a time MarshalJSON refuses): encoding/json, which it
		// stands in for, decides, and says why.
		var buf bytes.Buffer
		if err := json.NewEncoder(&buf).Encode(a); err != nil {
			return nil, fmt.Errorf("state: encoding: %w", err)
		}
		js = bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	}
	if 2*slotSizeFor(len(js)) > MaxFileSize {
		return nil, fmt.Errorf("state: refusing to save an applied state of %d bytes, more than the %d a state file holds", len(js), MaxFileSize/4-headerLen)
	}
	return js, nil
}

// examine reads f to learn its slots; false if it is not a whole state file.
func (s *Store) examine(f *storeFile) bool {
	st, ok := f.stamp()
	if !ok || st.size > MaxFileSize {
		return false
	}
	data := make([]byte, st.size)
	if _, err := f.readAt(data, 0); err != nil && !errors.Is(err, io.EOF) {
		return false
	}
	sl, fault := readSlots(data)
	if fault != nil {
		return false
	}
	sl.json = nil // not kept: the file is written, not read, from here on
	s.sl, s.stamp = sl, st
	return true
}

// overwrite writes the record of js over the older slot of f and flushes it.
func (s *Store) overwrite(f *storeFile, js []byte) error {
	k := 1 - s.sl.cur
	rec := appendRecord(s.buf[:0], s.sl.seq+1, js)
	n := len(rec)
	// Clear what is left of a longer record before it, so the slot holds one record.
	if pad := s.sl.used[k] - n; pad > 0 {
		rec = slices.Grow(rec, pad)[:n+pad]
		clear(rec[n:])
	}
	s.buf = rec
	if err := f.writeAt(rec, int64(k*s.sl.size)); err != nil {
		s.sl.used[k] = s.sl.size // part of it may be written
		return s.failed(err)
	}
	if err := f.datasync(); err != nil {
		s.sl.used[k] = s.sl.size
		return s.failed(err)
	}
	s.sl.cur, s.sl.seq, s.sl.used[k] = k, s.sl.seq+1, n
	s.stamp, s.known = f.stamp()
	return nil
}

// create makes the state file anew with js in its first slot, atomically, and
// leaves the legacy file's marker beside it.
func (s *Store) create(js []byte) error {
	size := slotSizeFor(len(js))
	file := make([]byte, 2*size)
	appendRecord(file[:0], s.sl.seq+1, js)
	s.known = false
	if err := statedir.Prepare(s.dir); err != nil {
		return fmt.Errorf("state: %w", err)
	}
	if err := atomicfile.WriteFile(Path(s.dir), file, 0o600); err != nil {
		return s.failed(err)
	}
	if err := markLegacy(s.dir); err != nil {
		return fmt.Errorf("state: the applied state is saved, but %s could not be marked as replaced by it (a meshhost older than this one would read it): %w",
			LegacyPath(s.dir), err)
	}
	return nil // the next Save reads the new file's layout
}

// MarkLegacy makes the legacy file the marker, once the applied state is kept in
// applied.state, if it is not the marker yet: create marks it as soon as the state
// file takes its name, and only create does (later saves are in place), so an agent
// killed between the two left the pre-upgrade state in the legacy file for good,
// which a meshhost older than this one, put back on the machine, would read instead
// of stopping, and accept older declarations. The agent calls it as it starts: one
// look at the file and a read of the marker's length, a write only when it is not
// the marker. Before the first save it does nothing: that save marks the file.
func (s *Store) MarkLegacy() error {
	if _, err := os.Lstat(Path(s.dir)); err != nil {
		return nil
	}
	if err := markLegacy(s.dir); err != nil {
		return fmt.Errorf("state: %s could not be marked as replaced by %s (a meshhost older than this one would read it): %w",
			LegacyPath(s.dir), Path(s.dir), err)
	}
	return nil
}

func (s *Store) failed(err error) error {
	path := Path(s.dir)
	if errors.Is(err, syscall.ENOSPC) {
		return fmt.Errorf("state: cannot record the applied state in %s because the disk is full; "+
			"any record saved before is intact: %w", path, err)
	}
	return fmt.Errorf("state: cannot record the applied state in %s (any record saved before is intact): %w", path, err)
}

// legacyMarker is what the legacy file holds once the state moved to the two-slot
// file: a format this agent's predecessors refuse to read ("format version 2 and
// this agent reads version 1"), so that an older meshhost put back on the machine
// stops instead of taking the state for absent and accepting older declarations.
var legacyMarker = []byte(`{"format": 2, "state": "` + FileName + `"}` + "\n")

// markLegacy makes the legacy file the marker, unless it is already. It reads the
// file as every state file is read (readRegular): never through a link, and no more
// than the marker's length.
func markLegacy(dir string) error {
	if cur, err := readRegular(LegacyPath(dir), int64(len(legacyMarker))); err == nil && bytes.Equal(cur, legacyMarker) {
		return nil
	}
	return atomicfile.WriteFile(LegacyPath(dir), legacyMarker, 0o600)
}
