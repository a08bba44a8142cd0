package statedir

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"mesh/host/dirlock"
)

// TestRemoveMadeTakesBackOnlyWhatCreateMade: Create reports the directories it
// made (the state directory, then its parents it made); RemoveMade removes them
// when the state directory holds nothing but its lock file, and never a directory
// that existed before or one holding anything else (a pending key kept for a run
// with the same token, a file someone put there meanwhile).
func TestRemoveMadeTakesBackOnlyWhatCreateMade(t *testing.T) {
	base := t.TempDir()
	os.Chmod(base, 0o700)
	state := filepath.Join(base, "a", "b", "state")
	made, err := Create(state)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{state, filepath.Join(base, "a", "b"), filepath.Join(base, "a")}; !slices.Equal(made, want) {
		t.Fatalf("made %q, want %q", made, want)
	}
	if again, err := Create(state); err != nil || len(again) != 0 {
		t.Fatalf("Create of an existing directory: %q, %v; want nothing made", again, err)
	}
	lock, err := dirlock.Acquire("state directory", state, "test")
	if err != nil {
		t.Fatal(err)
	}
	// Anything but the lock keeps it.
	for _, name := range []string{"enrol-pending.json", "notes.txt", ".hidden"} {
		p := filepath.Join(state, name)
		os.WriteFile(p, []byte("x"), 0o600)
		if removed, err := RemoveMade(made); removed || err != nil {
			t.Errorf("with %s: removed %v, %v; want it kept", name, removed, err)
		}
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s went: %v", name, err)
		}
		os.Remove(p)
	}
	os.Mkdir(filepath.Join(state, "managed"), 0o755)
	if removed, _ := RemoveMade(made); removed {
		t.Error("a directory holding a subdirectory was removed")
	}
	os.Remove(filepath.Join(state, "managed"))
	if removed, err := RemoveMade(made); !removed || err != nil {
		t.Fatalf("holding only its lock: removed %v, %v; want it removed", removed, err)
	}
	lock.Release()
	if _, err := os.Lstat(filepath.Join(base, "a")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a parent Create made is left: %v", err)
	}
	if _, err := os.Lstat(base); err != nil {
		t.Errorf("the directory that existed before went: %v", err)
	}
	// A parent someone wrote in meanwhile stays; the state directory goes.
	made, err = Create(state)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(base, "a", "other"), nil, 0o600)
	if removed, err := RemoveMade(made); !removed || err != nil {
		t.Fatalf("removed %v, %v", removed, err)
	}
	if _, err := os.Lstat(filepath.Join(base, "a", "other")); err != nil {
		t.Errorf("a file in a parent Create made went: %v", err)
	}
	if _, err := os.Lstat(state); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the state directory is left: %v", err)
	}
}

// TestAStateDirectoryUnderAFileIsNotADirectory: --state /etc/hosts/h1 is refused by
// Check and by Prepare as the file on its path it is (ErrNotDir, naming the file),
// not as "stat …: not a directory".
func TestAStateDirectoryUnderAFileIsNotADirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "hosts")
	os.WriteFile(file, []byte("x"), 0o600)
	for _, dir := range []string{filepath.Join(file, "h1"), filepath.Join(file, "h1", "h2")} {
		for name, f := range map[string]func(string) error{"Check": Check, "Prepare": Prepare} {
			err := f(dir)
			var nd *NotDirError
			if !errors.Is(err, ErrNotDir) || !errors.As(err, &nd) || nd.Part != file {
				t.Errorf("%s(%s): %v, want ErrNotDir naming %s", name, dir, err, file)
			}
		}
	}
}
