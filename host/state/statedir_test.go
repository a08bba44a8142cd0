//go:build unix

package state

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"mesh/host/statedir"
)

// TestLoadRefusesASymlinkedState: an applied state that is a link (to a state that
// claims nothing was applied, say, so that older declarations would be accepted) is
// refused, whichever of the two files it is.
func TestLoadRefusesASymlinkedState(t *testing.T) {
	for _, name := range []string{FileName, LegacyFileName} {
		t.Run(name, func(t *testing.T) {
			state, other := t.TempDir(), t.TempDir()
			theirs := filepath.Join(other, name)
			if name == FileName {
				if err := Save(other, sample()); err != nil {
					t.Fatal(err)
				}
			} else if err := os.WriteFile(theirs, fileOf(t, sample()), 0o600); err != nil {
				t.Fatal(err)
			}
			if a, err := Load(other); err != nil || a.Version != sample().Version {
				t.Fatalf("the file linked to does not load where it is: %+v, %v", a, err)
			}
			if err := os.Symlink(theirs, filepath.Join(state, name)); err != nil {
				t.Fatal(err)
			}
			a, err := Load(state)
			if !errors.Is(err, statedir.ErrSymlink) || outcome(t, err) != "unreadable" || a.Version != 0 {
				t.Fatalf("got %+v, %v; want the symbolic-link refusal", a, err)
			}
			if _, _, err := Open(state); !errors.Is(err, statedir.ErrSymlink) {
				t.Fatalf("Open: %v", err)
			}
		})
	}
}

func TestLoadRefusesAnotherUsersState(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving the state file to another user (chown to 65534) needs root")
	}
	state := t.TempDir()
	if err := Save(state, sample()); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(Path(state), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(state); !errors.Is(err, statedir.ErrNotOwned) || outcome(t, err) != "unreadable" {
		t.Fatalf("got %v, want the refusal of another user's file", err)
	}
}

func TestSaveRefusesAnUnsafeStateDirectory(t *testing.T) {
	state := t.TempDir()
	if err := os.Chmod(state, 0o707); err != nil {
		t.Fatal(err)
	}
	if err := Save(state, sample()); !errors.Is(err, statedir.ErrUnsafe) {
		t.Fatalf("Save: %v, want statedir.ErrUnsafe", err)
	}
	if entries, _ := os.ReadDir(state); len(entries) != 0 {
		t.Fatalf("something was written: %v", entries)
	}
}

// TestMarkLegacyDoesNotFollowALink: the legacy file is compared with the marker
// without reading through a link (one to /dev/zero would never end).
func TestMarkLegacyDoesNotFollowALink(t *testing.T) {
	state := t.TempDir()
	if err := os.Symlink("/dev/zero", LegacyPath(state)); err != nil {
		t.Fatal(err)
	}
	if err := Save(state, sample()); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(LegacyPath(state)); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("the legacy file is %v, %v; want the marker in place of the link", fi, err)
	}
}
