package apply

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
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

	// A root the agent made (in a directory of root's: it never makes the ones
	// above): judged once, then written at each apply; the same path swapped later
	// for another user's link is judged again and refused.
	if err := os.RemoveAll(theirs); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(theirs, 0o755); err != nil {
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

// rootFixture is a managed root at base/vol/root with a guard that accepted it, and
// one file applied there.
type rootFixture struct {
	base, vol, root string
	a               FileApplier
	files           []File
}

func newRootFixture(t *testing.T) *rootFixture {
	t.Helper()
	base := t.TempDir()
	f := &rootFixture{base: base, vol: filepath.Join(base, "vol"), root: filepath.Join(base, "vol", "root")}
	if err := os.MkdirAll(f.root, 0o755); err != nil {
		t.Fatal(err)
	}
	f.a = FileApplier{Root: f.root, Guard: &RootGuard{}}
	if err := f.a.Guard.Accept(f.root); err != nil {
		t.Fatal(err)
	}
	f.files = []File{{Path: "etc/app.conf", Data: []byte("declared\n"), Mode: 0o640}}
	if _, err := f.a.Apply(context.Background(), f.files, nil); err != nil {
		t.Fatal(err)
	}
	return f
}

// refused asserts that an Apply and a Differs of the fixture's files are refused as
// ErrRootGone, and returns the Apply's error.
func (f *rootFixture) refused(t *testing.T, when string) error {
	t.Helper()
	_, err := f.a.Apply(context.Background(), f.files, []string{"etc/app.conf"})
	if !errors.Is(err, ErrRootGone) {
		t.Fatalf("%s: Apply gave %v, want ErrRootGone", when, err)
	}
	if _, derr := f.a.Differs(context.Background(), f.files, []string{"etc/app.conf"}); !errors.Is(derr, ErrRootGone) {
		t.Fatalf("%s: Differs gave %v, want ErrRootGone", when, derr)
	}
	return err
}

// TestAVanishedRootIsNotMadeAgain: a managed root whose file system was unmounted, or
// whose parent was removed, while the agent ran is not made again with the
// directories above it (the audit's unmounted tmpfs: the declared files, a 0640 one
// included, written under the mount point, and their hooks run), nor made in
// another directory that took its parent's place (the mount point an unmount
// uncovers). It is refused as ErrRootGone, naming what is missing, and nothing is
// made; once the same directory is back, applies write there again.
func TestAVanishedRootIsNotMadeAgain(t *testing.T) {
	f := newRootFixture(t)
	away := filepath.Join(f.base, "away")
	if err := os.Rename(f.vol, away); err != nil { // unmounted, or removed
		t.Fatal(err)
	}
	err := f.refused(t, "the root's parent gone")
	var gone *RootGoneError
	if !errors.As(err, &gone) || gone.Missing != f.vol || !strings.Contains(err.Error(), "restart the agent") {
		t.Fatalf("the refusal does not name %s, nor say what to do: %v", f.vol, err)
	}
	if _, err := os.Lstat(f.vol); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("%s was made again: %v", f.vol, err)
	}

	// The mount point below: a directory at the parent's path, another one.
	if err := os.Mkdir(f.vol, 0o755); err != nil {
		t.Fatal(err)
	}
	err = f.refused(t, "another directory in the parent's place")
	if !errors.As(err, &gone) || gone.Moved != f.vol {
		t.Fatalf("the refusal does not name %s as another directory: %v", f.vol, err)
	}
	if entries, _ := os.ReadDir(f.vol); len(entries) != 0 {
		t.Fatalf("written under the uncovered mount point: %v", entries)
	}

	// Mounted again (the same directory back at the path): applied there.
	if err := os.Remove(f.vol); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(away, f.vol); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.root, "etc", "app.conf"), []byte("edited\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if res, err := f.a.Apply(context.Background(), f.files, []string{"etc/app.conf"}); err != nil || len(res.Written) != 1 {
		t.Fatalf("the root back: %+v, %v", res, err)
	}
}

// TestARootReplacedIsNotWrittenInto: another directory at the managed root's path
// (the file system's mount point once it is unmounted, a directory put in its
// place, a link swapped in to a directory of root's) is refused as ErrRootGone,
// with both identities, and nothing is written or removed there: before, the
// declared files went into it, and a file no longer declared would have been
// removed from it. The directory the agent started with (Accept), back in its
// place, is written again.
func TestARootReplacedIsNotWrittenInto(t *testing.T) {
	f := newRootFixture(t)
	away := filepath.Join(f.base, "away")
	if err := os.Rename(f.root, away); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(f.root, 0o755); err != nil {
		t.Fatal(err)
	}
	err := f.refused(t, "another directory in the root's place")
	var gone *RootGoneError
	if !errors.As(err, &gone) || gone.Moved != f.root || gone.Was == gone.Now {
		t.Fatalf("the refusal does not tell the two directories apart: %v", err)
	}
	if entries, _ := os.ReadDir(f.root); len(entries) != 0 {
		t.Fatalf("written into the other directory: %v", entries)
	}

	other := filepath.Join(f.base, "other")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "keep.txt"), []byte("theirs"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(f.root); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, f.root); err != nil {
		t.Fatal(err)
	}
	// A declaration that drops a path would remove it from the directory the link
	// aims at.
	if _, err := f.a.Apply(context.Background(), nil, []string{"keep.txt"}); !errors.Is(err, ErrRootGone) {
		t.Fatalf("a root swapped for a link: %v, want ErrRootGone", err)
	}
	err = f.refused(t, "a link in the root's place")
	if !errors.As(err, &gone) || gone.Target != other || !strings.Contains(err.Error(), "symbolic link to "+other) {
		t.Fatalf("the refusal does not say where the link points: %v", err)
	}
	if entries, _ := os.ReadDir(other); len(entries) != 1 || entries[0].Name() != "keep.txt" {
		t.Fatalf("the directory the link aims at was changed: %v", entries)
	}

	if err := os.Remove(f.root); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(away, f.root); err != nil {
		t.Fatal(err)
	}
	if _, err := f.a.Apply(context.Background(), f.files, []string{"etc/app.conf"}); err != nil {
		t.Fatalf("the root moved back: %v", err)
	}
}

// TestARootReplacedBeforeTheFirstApplyIsRefused: the root the agent started with
// (Accept) is the one, not the first the applies find: unmounted before the first
// check, its mount point is refused too.
func TestARootReplacedBeforeTheFirstApplyIsRefused(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	a := FileApplier{Root: root, Guard: &RootGuard{}}
	if err := a.Guard.Accept(root); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(root, root+".away"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	files := []File{{Path: "f", Data: []byte("x"), Mode: 0o644}}
	if _, err := a.Apply(context.Background(), files, nil); !errors.Is(err, ErrRootGone) {
		t.Fatalf("another directory before the first apply: %v, want ErrRootGone", err)
	}
}

// TestARootRemovedByHandIsMadeAgain: the root itself removed, from the directory it
// was in (its parent the same), is made again as the agent makes it at the start,
// and written; so is one removed again later.
func TestARootRemovedByHandIsMadeAgain(t *testing.T) {
	f := newRootFixture(t)
	for i := range 2 {
		if err := os.RemoveAll(f.root); err != nil {
			t.Fatal(err)
		}
		if d, err := f.a.Differs(context.Background(), f.files, []string{"etc/app.conf"}); err != nil || !d {
			t.Fatalf("removal %d: Differs %t, %v", i+1, d, err)
		}
		if res, err := f.a.Apply(context.Background(), f.files, []string{"etc/app.conf"}); err != nil || len(res.Written) != 1 {
			t.Fatalf("removal %d: %+v, %v", i+1, res, err)
		}
	}
}

// TestARootIsMadeOnlyInAnExistingDirectory: a root that does not exist, nor does the
// directory above it, is not made with its parents (ErrRootParentMissing), as the
// agent's start refuses it: a mistyped path is not a new tree of declared files.
func TestARootIsMadeOnlyInAnExistingDirectory(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "missing", "root")
	files := []File{{Path: "f", Data: []byte("x"), Mode: 0o644}}
	for name, a := range map[string]FileApplier{"guarded": {Root: root, Guard: &RootGuard{}}, "unguarded": {Root: root}} {
		if _, err := a.Apply(context.Background(), files, nil); !errors.Is(err, ErrRootParentMissing) {
			t.Fatalf("%s: %v, want ErrRootParentMissing", name, err)
		}
		if _, err := os.Lstat(filepath.Join(base, "missing")); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s: the parent was made: %v", name, err)
		}
	}
}
