package apply

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"mesh/host/statedir"
)

// TestTheRootIsJudgedAtEachApply: a managed root whose path had a missing part when
// the agent started (/tmp/x/root, /tmp/x made later) is judged when an apply opens
// it, not only at the start. Another user makes the missing directory and a link
// in it to a directory of root's: the apply refuses and writes nothing there, and
// does so again when the user swaps the link for another while the agent runs (the
// file check's put back). Before, both writes landed in root's directory. A root
// the agent made itself is judged once, and later applies write there.
func TestTheRootIsJudgedAtEachApply(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("acting as another user (chown to 65534) needs root")
	}
	base := t.TempDir()
	if err := os.Chmod(base, os.ModeSticky|0o777); err != nil { // as /tmp
		t.Fatal(err)
	}
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.Mkdir(victim, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(base, "x", "root")
	check := func(p string) error { return statedir.CheckRoot("the managed root", p) }
	if err := check(path); err != nil {
		t.Fatalf("at the agent's start the path is fine: %v", err)
	}
	a := FileApplier{Root: path, Guard: &RootGuard{Check: check}}
	files := []File{{Path: "app.conf", Data: []byte("declared\n"), Mode: 0o644}}

	// The other user's directory and link, made after the start.
	theirs := filepath.Join(base, "x")
	if err := os.Mkdir(theirs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, path); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(path, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(theirs, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Apply(context.Background(), files, nil); !errors.Is(err, statedir.ErrUnsafePath) {
		t.Fatalf("apply through another user's directory and link: %v, want ErrUnsafePath", err)
	}
	if _, err := a.Differs(context.Background(), files, nil); !errors.Is(err, statedir.ErrUnsafePath) {
		t.Fatalf("the file check through them: %v, want ErrUnsafePath", err)
	}
	if entries, _ := os.ReadDir(victim); len(entries) != 0 {
		t.Fatalf("written into the directory the link aims at: %v", entries)
	}

	// A root the agent made: judged once, then written at each apply; the same
	// path swapped later for another user's link is judged again and refused.
	if err := os.RemoveAll(theirs); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Apply(context.Background(), files, nil); err != nil {
		t.Fatalf("apply into a root the agent makes: %v", err)
	}
	if _, err := a.Apply(context.Background(), files, []string{"app.conf"}); err != nil {
		t.Fatalf("the next apply: %v", err)
	}
	if err := os.Rename(path, path+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, path); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(path, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Apply(context.Background(), files, []string{"app.conf"}); !errors.Is(err, statedir.ErrUnsafePath) {
		t.Fatalf("apply after the root was swapped for another user's link: %v, want ErrUnsafePath", err)
	}
	if entries, _ := os.ReadDir(victim); len(entries) != 0 {
		t.Fatalf("written into the directory the link aims at: %v", entries)
	}
}

// TestARootSwappedDuringItsCheckIsRefused: the path must lead, after the check, to
// the directory opened before it: a path swapped back to a safe one for the check
// is caught (ErrRootMoved).
func TestARootSwappedDuringItsCheckIsRefused(t *testing.T) {
	base := t.TempDir()
	path := filepath.Join(base, "root")
	elsewhere := filepath.Join(base, "elsewhere")
	for _, d := range []string{path, elsewhere} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	swapped := false
	g := &RootGuard{Check: func(p string) error {
		if !swapped {
			swapped = true
			if err := os.Rename(path, path+".old"); err != nil {
				return err
			}
			return os.Rename(elsewhere, path)
		}
		return nil
	}}
	a := FileApplier{Root: path, Guard: g}
	files := []File{{Path: "f", Data: []byte("x"), Mode: 0o644}}
	if _, err := a.Apply(context.Background(), files, nil); !errors.Is(err, ErrRootMoved) {
		t.Fatalf("a root swapped during its check: %v, want ErrRootMoved", err)
	}
	if _, err := os.Stat(filepath.Join(path+".old", "f")); err == nil {
		t.Fatal("written into the directory opened before the swap")
	}
	if _, err := a.Apply(context.Background(), files, nil); err != nil {
		t.Fatalf("the next apply, the path left as it is: %v", err)
	}
	if _, err := os.Stat(filepath.Join(path, "f")); err != nil {
		t.Fatalf("not written at the root the path leads to: %v", err)
	}
}
