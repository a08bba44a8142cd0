package state

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/host/internal/jsonfile"
)

// version returns sample() at version v, so that each save differs.
func version(v uint64) Applied {
	a := sample()
	a.Version = v
	return a
}

func mustLoad(t *testing.T, dir string) Applied {
	t.Helper()
	a, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// TestStoreSavesInPlace: after the first save, every save rewrites the same file in
// place, alternating its two slots, and Load always reads the latest.
func TestStoreSavesInPlace(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	s := NewStore(dir)
	if err := s.Save(version(1)); err != nil {
		t.Fatal(err)
	}
	ino := inode(t, Path(dir))
	fi, _ := os.Stat(Path(dir))
	size := fi.Size()
	for v := uint64(2); v <= 9; v++ {
		a := version(v)
		if v%3 == 0 {
			a.Managed = nil // a shorter record over a longer one
		}
		if err := s.Save(a); err != nil {
			t.Fatal(err)
		}
		if got := mustLoad(t, dir); !reflect.DeepEqual(got, a) {
			t.Fatalf("after saving v%d Load gave\n%+v", v, got)
		}
		if inode(t, Path(dir)) != ino {
			t.Fatalf("v%d: the file was made anew, not written in place", v)
		}
		if fi, _ := os.Stat(Path(dir)); fi.Size() != size {
			t.Fatalf("v%d: the file's size changed from %d to %d", v, size, fi.Size())
		}
	}
	// Each slot holds one record and zeros after it: a shorter record cleared the
	// tail of the longer one it replaced.
	data, _ := os.ReadFile(Path(dir))
	sl, fault := readSlots(data)
	if fault != nil {
		t.Fatal(fault)
	}
	for i := range 2 {
		if !allZero(data[i*sl.size+sl.used[i] : (i+1)*sl.size]) {
			t.Fatalf("slot %d holds bytes after its record", i)
		}
	}
	// A new Store (the agent restarted) goes on from the newest record.
	s2 := NewStore(dir)
	if err := s2.Save(version(10)); err != nil {
		t.Fatal(err)
	}
	if got := mustLoad(t, dir); got.Version != 10 || inode(t, Path(dir)) != ino {
		t.Fatalf("after a restart: v%d, same file %t", got.Version, inode(t, Path(dir)) == ino)
	}
}

// TestStoreTornWriteKeepsPrevious: whatever a crash leaves of the newest record (cut
// short, zeroed, flipped bits), Load reads the record before it.
func TestStoreTornWriteKeepsPrevious(t *testing.T) {
	for _, tc := range []struct {
		name string
		tear func(rec []byte)
	}{
		{"cut after the header", func(rec []byte) { clear(rec[headerLen:]) }},
		{"cut mid-header", func(rec []byte) { clear(rec[20:]) }},
		{"never reached the disk", func(rec []byte) { clear(rec) }},
		{"a flipped bit in the JSON", func(rec []byte) { rec[headerLen+10] ^= 1 }},
		{"a flipped bit in the sequence", func(rec []byte) { rec[len(recordMagic)+6] ^= 1 }},
		{"the length grown", func(rec []byte) { copy(rec[prefixLen-9:], "000fffff") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := NewStore(dir)
			for v := uint64(1); v <= 3; v++ {
				if err := s.Save(version(v)); err != nil {
					t.Fatal(err)
				}
			}
			data, _ := os.ReadFile(Path(dir))
			sl, _ := readSlots(data)
			tc.tear(data[sl.cur*sl.size : sl.cur*sl.size+sl.used[sl.cur]])
			if err := os.WriteFile(Path(dir), data, 0o600); err != nil {
				t.Fatal(err)
			}
			if got := mustLoad(t, dir); got.Version != 2 {
				t.Fatalf("Load gave v%d, want the record before the torn one, v2", got.Version)
			}
			// The agent goes on: its next record goes over the torn one.
			s2 := NewStore(dir)
			if err := s2.Save(version(4)); err != nil {
				t.Fatal(err)
			}
			if got := mustLoad(t, dir); got.Version != 4 {
				t.Fatalf("after the next save: v%d", got.Version)
			}
		})
	}
}

// TestStoreGrows: a state that outgrows its slot makes the file anew, bigger.
func TestStoreGrows(t *testing.T) {
	dir := t.TempDir()
	s := NewStore(dir)
	if err := s.Save(version(1)); err != nil {
		t.Fatal(err)
	}
	big := version(2)
	for i := range 400 {
		big.Managed = append(big.Managed, "srv/app/"+strings.Repeat("f", 20)+"-"+string(rune('a'+i%26))+"/"+strings.Repeat("x", i%7)+"file")
	}
	big.Managed = dedupe(big.Managed)
	for v := uint64(2); v <= 4; v++ {
		big.Version = v
		if err := s.Save(big); err != nil {
			t.Fatal(err)
		}
		if got := mustLoad(t, dir); !reflect.DeepEqual(got, big) {
			t.Fatalf("v%d did not load back", v)
		}
	}
	if fi, _ := os.Stat(Path(dir)); fi.Size() <= 2*pageSize {
		t.Fatalf("the file did not grow: %d bytes", fi.Size())
	}
}

func dedupe(list []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range list {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// TestLegacyStateMigrates: an agent of this version starts on the state an older one
// left in applied.json; its first save writes applied.state and turns applied.json
// into a marker, which an older agent refuses to read ("format version 2") instead of
// taking the state for absent.
func TestLegacyStateMigrates(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(LegacyPath(dir), fileOf(t, version(7)), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := mustLoad(t, dir); got.Version != 7 {
		t.Fatalf("legacy state: v%d", got.Version)
	}
	s := NewStore(dir)
	if err := s.Save(version(8)); err != nil {
		t.Fatal(err)
	}
	if got := mustLoad(t, dir); got.Version != 8 {
		t.Fatalf("after the first save: v%d", got.Version)
	}
	marker, _ := os.ReadFile(LegacyPath(dir))
	if !bytes.Equal(marker, legacyMarker) {
		t.Fatalf("applied.json holds %q, want the marker", marker)
	}
	// What an older agent does with it: its decoder, format version 1.
	var old Applied
	err := jsonfile.Decode(LegacyPath(dir), jsonfile.ReadRegular, MaxFileSize, 1, &old, &old.Format)
	var f *jsonfile.Fault
	if !errors.As(err, &f) || !strings.Contains(f.Corrupt, "format version 2") {
		t.Fatalf("an older agent would read the marker as %v", err)
	}
	// applied.state gone (removed by hand) with the marker still there: not absent.
	os.Remove(Path(dir))
	_, err = Load(dir)
	var ce *CorruptError
	if !errors.As(err, &ce) || !strings.Contains(ce.Reason, "missing") {
		t.Fatalf("marker without the state: %v", err)
	}
}

// TestStoreFileChangedWhileRunning: applied.state removed, replaced or rewritten by
// hand while the agent runs. The agent's next record is what Load reads, as when
// every save made the file anew.
func TestStoreFileChangedWhileRunning(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, dir string)
	}{
		{"removed", func(t *testing.T, dir string) { os.Remove(Path(dir)) }},
		{"replaced by a restored copy", func(t *testing.T, dir string) {
			// A file made anew (another inode) whose record has a high sequence.
			file := restoredCopy(t)
			tmp := Path(dir) + ".restore"
			os.WriteFile(tmp, file, 0o600)
			if err := os.Rename(tmp, Path(dir)); err != nil {
				t.Fatal(err)
			}
		}},
		{"copied over in place", func(t *testing.T, dir string) {
			// The same inode, truncated and written (cp onto it), and of the same
			// size: what tells is its change time, which moves with the kernel's
			// clock tick (a few milliseconds), sooner than a person copies a file.
			time.Sleep(20 * time.Millisecond)
			file := restoredCopy(t)
			if err := os.WriteFile(Path(dir), file, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := NewStore(dir)
			for v := uint64(4); v <= 5; v++ {
				if err := s.Save(version(v)); err != nil {
					t.Fatal(err)
				}
			}
			tc.change(t, dir)
			if err := s.Save(version(6)); err != nil {
				t.Fatal(err)
			}
			if got := mustLoad(t, dir); got.Version != 6 {
				t.Fatalf("Load gave v%d, want the agent's v6", got.Version)
			}
		})
	}
}

// restoredCopy is a state file from elsewhere whose records both outrank the
// agent's: a Store that wrote on without reading it again would be outranked.
func restoredCopy(t *testing.T) []byte {
	file := make([]byte, 2*pageSize)
	appendRecord(file[:0], 999, mustJSON(t, version(2)))
	appendRecord(file[pageSize:pageSize], 1000, mustJSON(t, version(3)))
	return file
}

func mustJSON(t *testing.T, a Applied) []byte {
	t.Helper()
	s := NewStore(t.TempDir())
	js, err := s.encode(a)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// TestLoadStateFile reads every kind of applied.state.
func TestLoadStateFile(t *testing.T) {
	rec := func(seq uint64, js []byte) []byte { return appendRecord(nil, seq, js) }
	file := func(slot0, slot1 []byte) []byte {
		f := make([]byte, 2*pageSize)
		copy(f, slot0)
		copy(f[pageSize:], slot1)
		return f
	}
	good := mustJSON(t, version(5))
	newer := mustJSON(t, version(6))
	garbage := bytes.Repeat([]byte("x"), 300)
	for _, tc := range []struct {
		name, want, reason string
		data               []byte
		version            uint64
	}{
		{"one record", "ok", "", file(rec(1, good), nil), 5},
		{"newest in the second slot", "ok", "", file(rec(1, good), rec(2, newer)), 6},
		{"newest in the first slot", "ok", "", file(rec(3, newer), rec(2, good)), 6},
		{"newest torn", "ok", "", file(rec(1, good), rec(2, newer)[:headerLen+20]), 5},
		{"empty", "truncated", "", nil, 0},
		{"zero-filled", "truncated", "", make([]byte, 2*pageSize), 0},
		{"cut in the second slot", "truncated", "", file(rec(1, good), nil)[:pageSize+100], 0},
		{"cut in the first slot", "truncated", "", rec(1, good), 0},
		{"both torn", "corrupt", "neither", file(rec(1, good)[:200], rec(2, newer)[:300]), 0},
		{"not a state file", "corrupt", "does not start with a record", file(garbage, garbage), 0},
		{"JSON written by hand", "corrupt", "does not start with a record", fileOf(t, version(5)), 0},
		{"equal sequences", "corrupt", "both its records have sequence 4", file(rec(4, good), rec(4, newer)), 0},
		{"the record is not JSON", "corrupt", "not valid JSON", file(rec(1, []byte("version=7")), nil), 0},
		{"the record's JSON is cut", "corrupt", "ends early", file(rec(1, good[:len(good)/2]), nil), 0},
		{"the record has an unknown field", "corrupt", "unknown field", file(rec(1, bytes.Replace(good, []byte(`"format":1,`), []byte(`"format":1,"versoin":9,`), 1)), nil), 0},
		{"the record is of a newer format", "corrupt", "format version 2", file(rec(1, bytes.Replace(good, []byte(`"format":1`), []byte(`"format":2`), 1)), nil), 0},
		{"the record fails validation", "corrupt", "body_digest", file(rec(1, bytes.Replace(good, []byte(`"body_digest":"ab`), []byte(`"body_digest":"zz`), 1)), nil), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(Path(dir), tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			got := checkLoad(t, dir, Path(dir), tc.want, tc.reason)
			if tc.want == "ok" && got.Version != tc.version {
				t.Fatalf("loaded v%d, want v%d", got.Version, tc.version)
			}
		})
	}
}

// TestOpenKnowsTheFile: the Store that Open returns writes in place at once, without
// reading the file again; one whose file changed after Open reads it again first.
func TestOpenKnowsTheFile(t *testing.T) {
	dir := t.TempDir()
	if err := Save(dir, version(1)); err != nil {
		t.Fatal(err)
	}
	ino := inode(t, Path(dir))
	a, s, err := Open(dir)
	if err != nil || a.Version != 1 {
		t.Fatalf("Open: v%d, %v", a.Version, err)
	}
	if !s.known {
		t.Fatal("the Store from Open does not know the file it read")
	}
	// What Save compares with before writing: the stamp of the file it opens.
	f, err := openStoreFile(Path(dir))
	if err != nil {
		t.Fatal(err)
	}
	if st, ok := f.stamp(); !ok || st != s.stamp {
		t.Fatalf("the opened file's stamp %+v differs from what Open recorded %+v: the first save would read the file again", st, s.stamp)
	}
	f.close()
	if err := s.Save(version(2)); err != nil {
		t.Fatal(err)
	}
	if got := mustLoad(t, dir); got.Version != 2 || inode(t, Path(dir)) != ino {
		t.Fatalf("v%d, in place %t", got.Version, inode(t, Path(dir)) == ino)
	}
	// Written by another after Open: its record outranks what the Store knew.
	_, s2, _ := Open(dir)
	time.Sleep(20 * time.Millisecond) // the change time moves with the clock tick
	if err := os.WriteFile(Path(dir), restoredCopy(t), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s2.Save(version(9)); err != nil {
		t.Fatal(err)
	}
	if got := mustLoad(t, dir); got.Version != 9 {
		t.Fatalf("after the file changed under the Store: v%d, want v9", got.Version)
	}
	// Legacy state: nothing known, the first save makes applied.state.
	legacy := t.TempDir()
	os.WriteFile(LegacyPath(legacy), fileOf(t, version(4)), 0o600)
	a, s3, err := Open(legacy)
	if err != nil || a.Version != 4 || s3.known {
		t.Fatalf("Open of a legacy state: v%d, known %t, %v", a.Version, s3.known, err)
	}
}

// TestAStateOfANewerAgentIsNotCalledCorrupt (audit of mixed versions, finding 4): an
// agent put back to an older version read a member a newer one added as corruption
// and advised removing the file, which makes the agent trust retired signing keys
// again. A member this version does not know is named as the mark of a newer
// meshhost, with no advice to remove the file first; it still stops the agent
// (ErrCorrupt, the same exit).
func TestAStateOfANewerAgentIsNotCalledCorrupt(t *testing.T) {
	dir := t.TempDir()
	st := NewStore(dir)
	if err := st.Save(sample()); err != nil {
		t.Fatal(err)
	}
	js, err := st.encode(sample())
	if err != nil {
		t.Fatal(err)
	}
	newer := append(bytes.TrimSuffix(bytes.Clone(js), []byte("}")), []byte(`,"hooks_of_the_future":[]}`)...)
	if err := (&Store{dir: dir, sl: slots{seq: 5}}).create(newer); err != nil {
		t.Fatal(err)
	}
	_, err = Load(dir)
	var ce *CorruptError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || ce.Unknown != "hooks_of_the_future" {
		t.Fatalf("a state with a member of a newer agent: %v", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "a newer meshhost wrote it") || !strings.Contains(msg, "do not remove the file") ||
		strings.Index(msg, "remove "+Path(dir)) < strings.Index(msg, "Only if no newer meshhost") {
		t.Errorf("the message does not say a newer meshhost wrote it before any advice to remove it:\n%s", msg)
	}
}

// TestAStateDirectoryGoneIsNotMadeAgain: a state directory removed while the agent
// runs is not made again by the next save with applied.state alone (no
// identity.json: the agent would not start again, saying "not enrolled"), and one
// replaced by another directory (made anew, or a copy) is not written into: the
// save is refused as ErrDirGone, saying which, and nothing is made or written. The
// same directory back at its path (moved back) is saved in again, and a state file
// removed from the directory the agent started with is made anew, as before.
func TestAStateDirectoryGoneIsNotMadeAgain(t *testing.T) {
	open := func(t *testing.T) (string, *Store) {
		t.Helper()
		dir := filepath.Join(t.TempDir(), "state")
		if err := Save(dir, version(1)); err != nil {
			t.Fatal(err)
		}
		_, s, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		return dir, s
	}
	refused := func(t *testing.T, s *Store, dir string, replaced bool) {
		t.Helper()
		err := s.Save(version(2))
		var gone *DirGoneError
		if !errors.As(err, &gone) || !errors.Is(err, ErrDirGone) || gone.Replaced != replaced || gone.Dir != dir {
			t.Fatalf("save: %v, want a *DirGoneError for %s (replaced %t)", err, dir, replaced)
		}
		if err := s.Gone(); !errors.Is(err, ErrDirGone) {
			t.Fatalf("Gone: %v, want ErrDirGone", err)
		}
	}

	t.Run("removed", func(t *testing.T) {
		dir, s := open(t)
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		refused(t, s, dir, false)
		if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the state directory was made again: %v", err)
		}
	})
	t.Run("moved away and back", func(t *testing.T) {
		dir, s := open(t)
		if err := os.Rename(dir, dir+".away"); err != nil {
			t.Fatal(err)
		}
		refused(t, s, dir, false)
		if err := os.Rename(dir+".away", dir); err != nil {
			t.Fatal(err)
		}
		if err := s.Save(version(3)); err != nil {
			t.Fatalf("the directory back: %v", err)
		}
		if got := mustLoad(t, dir); got.Version != 3 {
			t.Fatalf("Load gave v%d, want v3", got.Version)
		}
	})
	t.Run("replaced by an empty directory", func(t *testing.T) {
		dir, s := open(t)
		if err := os.Rename(dir, dir+".away"); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		refused(t, s, dir, true)
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Fatalf("written into the other directory: %v", entries)
		}
	})
	t.Run("replaced by a copy", func(t *testing.T) {
		dir, s := open(t)
		data, err := os.ReadFile(Path(dir))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(dir, dir+".away"); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(Path(dir), data, 0o600); err != nil {
			t.Fatal(err)
		}
		refused(t, s, dir, true)
		if got := mustLoad(t, dir); got.Version != 1 {
			t.Fatalf("the copy holds v%d, want its own v1", got.Version)
		}
	})
	t.Run("its file removed", func(t *testing.T) {
		dir, s := open(t)
		if err := os.Remove(Path(dir)); err != nil {
			t.Fatal(err)
		}
		if err := s.Save(version(2)); err != nil {
			t.Fatal(err)
		}
		if got := mustLoad(t, dir); got.Version != 2 {
			t.Fatalf("Load gave v%d, want v2", got.Version)
		}
	})
}

// TestTheLegacyFileIsMarkedLate (durability audit, finding 4): an agent killed after
// applied.state took its name and before applied.json became the marker left the
// pre-upgrade state in applied.json for good (later saves are in place), which an
// older meshhost put back would read. MarkLegacy, as the agent starts, marks it.
func TestTheLegacyFileIsMarkedLate(t *testing.T) {
	dir := t.TempDir()
	if err := NewStore(dir).Save(version(8)); err != nil {
		t.Fatal(err)
	}
	// The kill: applied.state saved, applied.json still the legacy state.
	if err := os.WriteFile(LegacyPath(dir), fileOf(t, version(7)), 0o600); err != nil {
		t.Fatal(err)
	}
	a, s, err := Open(dir)
	if err != nil || a.Version != 8 {
		t.Fatalf("open: v%d, %v", a.Version, err)
	}
	if err := s.MarkLegacy(); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(version(9)); err != nil {
		t.Fatal(err)
	}
	if !isMarker(LegacyPath(dir), readRegular) {
		data, _ := os.ReadFile(LegacyPath(dir))
		t.Fatalf("applied.json holds %q, want the marker", data)
	}
	if got := mustLoad(t, dir); got.Version != 9 {
		t.Fatalf("after the save: v%d", got.Version)
	}

	// Before the first save (the legacy state the one kept): nothing is marked.
	fresh := t.TempDir()
	if err := os.WriteFile(LegacyPath(fresh), fileOf(t, version(7)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, s, err = Open(fresh)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.MarkLegacy(); err != nil {
		t.Fatal(err)
	}
	if got := mustLoad(t, fresh); got.Version != 7 {
		t.Fatalf("the legacy state, not moved yet: v%d, want 7", got.Version)
	}
}
