package state

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
)

// stateFile returns the bytes of a state file the agent wrote: one record, or two
// (the second slot written too) when both is set.
func stateFile(t *testing.T, both bool) []byte {
	t.Helper()
	dir := t.TempDir()
	if err := Save(dir, sample()); err != nil {
		t.Fatal(err)
	}
	if both {
		_, s, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		a := sample()
		a.Version++
		if err := s.Save(a); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(Path(dir))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestAStateFileAddedToIsNotCalledTruncated: a state file with bytes added after
// what the agent wrote (a copy appended to, a file extended to 3 MB) is corrupt,
// "something was added", not "truncated: it ends after 3000000 bytes, before its
// content is complete", which sent the operator looking for what was missing. A file
// cut short anywhere is still truncated.
func TestAStateFileAddedToIsNotCalledTruncated(t *testing.T) {
	one, two := stateFile(t, false), stateFile(t, true)
	grow := func(data []byte, fill byte, size int) []byte {
		return append(bytes.Clone(data), bytes.Repeat([]byte{fill}, size-len(data))...)
	}
	junk := append(bytes.Clone(two[:len(two)/2+headerLen+10]), 'x')
	junk = append(junk, two[len(junk):]...)
	for _, c := range []struct {
		name string
		data []byte
	}{
		{"one record, text to 3 MB", grow(one, 'x', 3000000)},
		{"two records, text to 3 MB", grow(two, 'x', 3000000)},
		{"two records, zeros to 3 MB", grow(two, 0, 3000000)},
		{"one record, one byte more", grow(one, '\n', len(one)+1)},
		{"two records, one byte more", grow(two, '\n', len(two)+1)},
		{"two records, a zero more", grow(two, 0, len(two)+1)},
		{"text inside the first slot, one byte more", grow(append(bytes.Clone(one[:len(one)/2-1]), 'x'), 0, len(one)+1)},
		{"text after the second record, one byte more", grow(junk, 0, len(two)+1)},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(Path(dir), c.data, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Load(dir)
		var ce *CorruptError
		if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want corrupt", c.name, err)
			continue
		}
		if !strings.Contains(ce.Reason, "added") || strings.Contains(err.Error(), "truncated") {
			t.Errorf("%s: %q does not say something was added", c.name, ce.Reason)
		}
	}
	// Cut short anywhere past its first header's magic, with or without a second
	// record, it is what it was.
	for _, good := range [][]byte{one, two} {
		for n := len(recordMagic) + 1; n < len(good); n += 97 {
			dir := t.TempDir()
			os.WriteFile(Path(dir), good[:n], 0o600)
			if _, err := Load(dir); !errors.Is(err, ErrTruncated) {
				t.Fatalf("cut at %d of %d: %v, want truncated", n, len(good), err)
			}
		}
	}
}
