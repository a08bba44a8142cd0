//go:build unix

package statedir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckFileAndParents: a file the agent acts on, and the directories above the
// managed root, pass only if no user but the agent's and root can change them: the
// file or a directory above it owned by another user, or writable by group or
// others, is refused; a sticky directory above (as /tmp) passes; links are
// resolved and the real path judged.
func TestCheckFileAndParents(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving a file to another user (chown to 65534) needs root")
	}
	base := t.TempDir()
	mk := func(p string, mode os.FileMode, dir bool) string {
		t.Helper()
		p = filepath.Join(base, p)
		if dir {
			if err := os.Mkdir(p, mode); err != nil {
				t.Fatal(err)
			}
		} else if err := os.WriteFile(p, []byte(`{"hooks":[]}`), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	etc := mk("etc", 0o755, true)
	good := mk("etc/hooks.json", 0o644, false)
	open := mk("etc/open.json", 0o666, false)
	theirs := mk("etc/theirs.json", 0o644, false)
	os.Chown(theirs, 65534, 65534)
	shared := mk("shared", 0o777, true)
	inShared := mk("shared/hooks.json", 0o644, false)
	sticky := mk("sticky", os.ModeSticky|0o777, true)
	inSticky := mk("sticky/hooks.json", 0o644, false)
	userDir := mk("home", 0o755, true)
	os.Chown(userDir, 65534, 65534)
	inUserDir := mk("home/hooks.json", 0o644, false)
	link := filepath.Join(shared, "link.json")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	_ = etc

	for _, c := range []struct {
		path string
		ok   bool
		part string
	}{
		{good, true, ""},
		{inSticky, true, ""},
		{link, true, ""}, // resolved: the file it names is judged, not the link
		{open, false, "it has mode 0666"},
		{theirs, false, "it belongs to uid 65534"},
		{inShared, false, shared + " has mode 0777"},
		{inUserDir, false, userDir + " belongs to uid 65534"},
	} {
		real, err := CheckFile("the hooks file", c.path)
		if c.ok {
			if err != nil {
				t.Errorf("%s: %v", c.path, err)
			} else if strings.Contains(real, "link") {
				t.Errorf("%s resolved to %s", c.path, real)
			}
			continue
		}
		var ue *UnsafePathError
		if !errors.Is(err, ErrUnsafePath) || !errors.As(err, &ue) || !strings.Contains(err.Error(), c.part) {
			t.Errorf("%s: %v, want ErrUnsafePath naming %q", c.path, err, c.part)
		}
	}

	// The managed root itself is not judged, nor its parts that do not exist yet;
	// the directories above the nearest one that does are.
	for _, c := range []struct {
		dir string
		ok  bool
	}{
		{filepath.Join(etc, "root"), true},
		{filepath.Join(etc, "not/yet/root"), true},
		{shared, true}, // the root itself may be writable by others
		{filepath.Join(sticky, "root"), true},
		{filepath.Join(shared, "root"), false},
		{filepath.Join(shared, "not/yet/root"), false},
		{filepath.Join(userDir, "root"), false},
	} {
		err := CheckParents("the managed root", c.dir)
		if c.ok != (err == nil) || err != nil && !errors.Is(err, ErrUnsafePath) {
			t.Errorf("CheckParents(%s) = %v, want ok %v", c.dir, err, c.ok)
		}
	}
	if _, err := OpenFile("the hooks file", filepath.Join(etc, "missing.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v", err)
	}
	if _, err := OpenFile("the hooks file", etc); err == nil {
		t.Error("a directory opened as the hooks file")
	}
}

// TestCheckRefusesAStateDirectoryUnderAnotherUsersDirectory: a user who owns a
// directory above the state directory can put another one in its place (an older
// copy of the agent's own, its applied state rolled back); Check refuses it.
func TestCheckRefusesAStateDirectoryUnderAnotherUsersDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving a directory to another user (chown to 65534) needs root")
	}
	home := filepath.Join(t.TempDir(), "home")
	if err := os.Mkdir(home, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Prepare(filepath.Join(home, "state")); err != nil {
		t.Fatalf("under the agent's own directory: %v", err)
	}
	if err := os.Chown(home, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if err := Check(filepath.Join(home, "state")); !errors.Is(err, ErrUnsafePath) {
		t.Fatalf("under another user's directory: %v, want ErrUnsafePath", err)
	}
}

// TestALinkAnotherUserOwnsIsRefused: a symbolic link on the way to the managed
// root, the state directory or the hooks file that another user owns is refused,
// naming it, though where it points passes every rule: the user planted it in a
// sticky directory (/tmp/mroot pointing into /root), and the agent wrote there as
// root where fs.protected_symlinks is off. The same link owned by root passes.
func TestALinkAnotherUserOwnsIsRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving a link to another user (uid 65534) needs root")
	}
	tmp := t.TempDir()
	if err := os.Chmod(tmp, 0o1777); err != nil {
		t.Fatal(err)
	}
	target := t.TempDir() // root's, 0700
	if err := os.WriteFile(filepath.Join(target, "hooks.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(tmp, "mroot")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(link, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	var ue *UnsafePathError
	if err := CheckParents("the managed root", filepath.Join(link, "srv")); !errors.As(err, &ue) || ue.Part != link || !strings.Contains(err.Error(), "is a symbolic link that belongs to") {
		t.Fatalf("CheckParents through another user's link: %v", err)
	}
	if _, err := CheckFile("the hooks file", filepath.Join(link, "hooks.json")); !errors.As(err, &ue) || ue.Part != link {
		t.Fatalf("CheckFile through another user's link: %v", err)
	}
	// A link to it through a link of root's still meets the other user's.
	outer := filepath.Join(t.TempDir(), "outer")
	if err := os.Symlink(link, outer); err != nil {
		t.Fatal(err)
	}
	if err := CheckParents("the managed root", filepath.Join(outer, "srv")); !errors.As(err, &ue) || ue.Part != link {
		t.Fatalf("CheckParents through root's link to another user's: %v", err)
	}
	if err := os.Lchown(link, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := CheckParents("the managed root", filepath.Join(link, "srv")); err != nil {
		t.Fatalf("the same link, root's: %v", err)
	}
}

// TestCheckRootRefusesARootAnotherUserOwns: the managed root itself may be one
// others write in (the operator's choice), but not one another user owns: its owner
// may make it 0777, or give it to anyone, at any time. A root not made yet passes.
func TestCheckRootRefusesARootAnotherUserOwns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving a directory to another user (chown to 65534) needs root")
	}
	base := t.TempDir()
	root := filepath.Join(base, "root")
	if err := CheckRoot("the managed root", root); err != nil {
		t.Fatalf("a root not made yet: %v", err)
	}
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := CheckRoot("the managed root", root); err != nil {
		t.Fatalf("a root others may write in: %v", err)
	}
	if err := os.Chown(root, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	err := CheckRoot("the managed root", root)
	if !errors.Is(err, ErrUnsafePath) || !strings.Contains(err.Error(), "belongs to") {
		t.Fatalf("a root another user owns: %v, want ErrUnsafePath naming its owner", err)
	}
}

// TestCheckRootWithoutLinksAgrees: CheckRoot's walk for a path with no link on its
// way gives the verdict, word for word, that its general walk gives: on roots made
// or not, under directories of its own, of another user, others may write (sticky
// or not), and the root itself another user's or others may write. A path with a
// link is left to the general walk.
func TestCheckRootWithoutLinksAgrees(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving directories to another user (chown to 65534) needs root")
	}
	base := t.TempDir()
	mk := func(rel string, mode os.FileMode, uid int) string {
		t.Helper()
		p := filepath.Join(base, rel)
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mk("own", 0o755, 0)
	mk("theirs", 0o755, 65534)
	mk("open", 0o777, 0)
	mk("sticky", os.ModeSticky|0o777, 0)
	mk("sticky/theirs", 0o755, 65534)
	mk("own/root-theirs", 0o755, 65534)
	mk("own/root-open", 0o777, 0)
	mk("own/root", 0o755, 0)
	if err := os.Symlink(filepath.Join(base, "own"), filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"own/root", "own/new/root", "theirs/root", "theirs/new/root", "open/root", "sticky/root", "sticky/new/root",
		"sticky/theirs/root", "own/root-theirs", "own/root-open", "own/root/../root", "own//root"} {
		dir := filepath.Join(base, rel)
		if rel == "own//root" {
			dir = base + "/" + rel // unclean on purpose
		}
		judged, fast := checkRootWithoutLinks("the managed root", dir)
		slow := checkRootWalk("the managed root", dir)
		if !judged {
			t.Errorf("%s: not judged without a link on its way", rel)
			continue
		}
		if fmt.Sprint(fast) != fmt.Sprint(slow) {
			t.Errorf("%s: %v, the general walk says %v", rel, fast, slow)
		}
	}
	if judged, _ := checkRootWithoutLinks("the managed root", filepath.Join(base, "link", "root")); judged {
		t.Error("a path with a link on its way was judged without following it")
	}
}
