package identity

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"mesh/host/statedir"
)

// TestLoadPendingRefusesALink (security.md: every file read from the state
// directory, enrol-pending.json included, is opened without following a link at its
// name): a pending enrolment swapped for a link to someone else's pending key is
// refused as a link, and the key it points to is never loaded.
func TestLoadPendingRefusesALink(t *testing.T) {
	state, theirs := t.TempDir(), t.TempDir()
	if err := SavePending(theirs, validPending(t)); err != nil {
		t.Fatalf("save their pending key: %v", err)
	}
	if _, err := LoadPending(theirs); err != nil {
		t.Fatalf("their pending key, read where it is (the positive control): %v", err)
	}
	if err := os.Symlink(PendingPath(theirs), filepath.Join(state, filepath.Base(PendingPath(state)))); err != nil {
		t.Fatal(err)
	}
	got, err := LoadPending(state)
	if !errors.Is(err, statedir.ErrSymlink) || got.Seed != "" {
		t.Fatalf("LoadPending through a link: %v (seed loaded: %v), want statedir.ErrSymlink", err, got.Seed != "")
	}
}
