package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"mesh/host/atomicfile"
)

// Store writes the applied state of one state directory for an agent that runs. Its
// first Save makes the file anew (a temp file, flushed, renamed over the old one, the
// directory flushed); each one after writes the new record over the older of the
// file's two slots and flushes it: one write and one data flush on a file kept open,
// where making the file anew costs a new file's blocks, two flushes and a rename on
// every applied declaration. A Store is the file's only writer: one meshhost runs per
// state directory (its lock).
type Store struct {
	dir string
	f   *os.File // the state file, once a Save made or found it whole
	sl  slots    // what f holds
	// stamp is f's as this Store last left it.
	stamp stamp
	buf   []byte // the record being written, reused
	// keyring is the keyring envelope last found to be JSON: it changes on a key
	// rotation, and checking it again on every save was a tenth of a save.
	keyring []byte
}

// NewStore returns the Store of stateDir. It opens nothing until the first Save.
func NewStore(stateDir string) *Store { return &Store{dir: stateDir} }

// Close releases the state file. The Store may be used again: its next Save opens
// the file anew.
func (s *Store) Close() error {
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f, s.sl = nil, slots{}
	return err
}

// Save records a durably: when it returns nil, a crash cannot lose it. A zero Format
// is taken as FormatVersion; an Applied that fails Validate is refused, so that Load
// can always read what Save wrote. On an error the previous record is intact; a full
// disk gives an error matching syscall.ENOSPC.
func (s *Store) Save(a Applied) error {
	js, err := s.encode(a)
	if err != nil {
		return err
	}
	if s.f != nil {
		if now, ok := stampOf(s.f); !ok || now != s.stamp {
			s.Close() // removed, replaced or written by someone else: look again
		}
	}
	if s.f == nil {
		s.attach()
	}
	if s.f != nil && headerLen+len(js) <= s.sl.size {
		return s.overwrite(js)
	}
	return s.create(js)
}

// stamp is what stampOf reads.
type stamp struct {
	linked              bool
	ctimeSec, ctimeNsec int64
	size                int64
}

// encode validates a and returns its JSON.
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
	}
	js, err := json.Marshal(a)
	if err != nil {
		return nil, fmt.Errorf("state: encoding: %w", err)
	}
	if 2*slotSizeFor(len(js)) > MaxFileSize {
		return nil, fmt.Errorf("state: refusing to save an applied state of %d bytes, more than the %d a state file holds", len(js), MaxFileSize/4-headerLen)
	}
	return js, nil
}

// attach opens the state file for writing in place, if it is there and whole; else
// it leaves s.f nil, and Save makes the file anew.
func (s *Store) attach() {
	f, err := os.OpenFile(Path(s.dir), os.O_RDWR|syscall.O_NOFOLLOW|atomicfile.NoPoll, 0)
	if err != nil {
		return
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > MaxFileSize {
		f.Close()
		return
	}
	data := make([]byte, fi.Size())
	if _, err := io.ReadFull(f, data); err != nil {
		f.Close()
		return
	}
	sl, fault := readSlots(data)
	if fault != nil {
		f.Close()
		return
	}
	st, ok := stampOf(f)
	if !ok {
		f.Close()
		return
	}
	sl.json = nil // not kept: the file is written, never read, from here on
	s.f, s.sl, s.stamp = f, sl, st
}

// overwrite writes the record of js over the older slot and flushes it.
func (s *Store) overwrite(js []byte) error {
	k := 1 - s.sl.cur
	rec := appendRecord(s.buf[:0], s.sl.seq+1, js)
	n := len(rec)
	// Clear what is left of a longer record before it, so the slot holds one record.
	for len(rec) < s.sl.used[k] {
		rec = append(rec, 0)
	}
	s.buf = rec
	if _, err := s.f.WriteAt(rec, int64(k*s.sl.size)); err != nil {
		s.sl.used[k] = s.sl.size // part of it may be written
		return s.failed(err)
	}
	if err := datasync(s.f); err != nil {
		s.sl.used[k] = s.sl.size
		return s.failed(err)
	}
	s.sl.cur, s.sl.seq, s.sl.used[k] = k, s.sl.seq+1, n
	if st, ok := stampOf(s.f); ok {
		s.stamp = st
	} else {
		s.Close() // the next Save looks again
	}
	return nil
}

// create makes the state file anew with js in its first slot, atomically, and
// leaves the legacy file's marker beside it; then it opens the new file.
func (s *Store) create(js []byte) error {
	size := slotSizeFor(len(js))
	file := make([]byte, 2*size)
	appendRecord(file[:0], s.sl.seq+1, js)
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("state: creating the state directory: %w", err)
	}
	if err := atomicfile.WriteFile(Path(s.dir), file, 0o600); err != nil {
		return s.failed(err)
	}
	if err := markLegacy(s.dir); err != nil {
		return fmt.Errorf("state: the applied state is saved, but %s could not be marked as replaced by it (a meshhost older than this one would read it): %w",
			LegacyPath(s.dir), err)
	}
	s.Close()
	s.attach()
	return nil
}

func (s *Store) failed(err error) error {
	path := Path(s.dir)
	if errors.Is(err, syscall.ENOSPC) {
		return fmt.Errorf("state: cannot record the applied state in %s because the disk is full; "+
			"the previous record is intact: %w", path, err)
	}
	return fmt.Errorf("state: cannot record the applied state in %s (the previous record is intact): %w", path, err)
}

// legacyMarker is what the legacy file holds once the state moved to the two-slot
// file: a format this agent's predecessors refuse to read ("format version 2 and
// this agent reads version 1"), so that an older meshhost put back on the machine
// stops instead of taking the state for absent and accepting older declarations.
var legacyMarker = []byte(`{"format": 2, "state": "` + FileName + `"}` + "\n")

// markLegacy makes the legacy file the marker, unless it is already.
func markLegacy(dir string) error {
	if cur, err := os.ReadFile(LegacyPath(dir)); err == nil && bytes.Equal(cur, legacyMarker) {
		return nil
	}
	return atomicfile.WriteFile(LegacyPath(dir), legacyMarker, 0o600)
}
