package datadir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckPlaceRefusesWhatAnotherUserCouldChange: a data directory under a
// directory another user owns (who may swap it for an older copy, revocations
// undone), behind a link another user owns, or one that is another user's or that
// others may write, is refused for serve, bootstrap and join, each naming what is
// at fault; an operator's read (--data) accepts one another user owns (serve's, read
// by root) that no one else may write. A data directory not made yet passes.
func TestCheckPlaceRefusesWhatAnotherUserCouldChange(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving directories to another user (chown to 65534) needs root")
	}
	base := t.TempDir()
	mk := func(p string, mode os.FileMode, uid int) string {
		t.Helper()
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
	if err := Dir(filepath.Join(base, "new", "cp")).CheckPlace(); err != nil {
		t.Fatalf("a data directory not made yet: %v", err)
	}
	if err := Dir(mk(filepath.Join(base, "mine"), 0o700, 0)).CheckPlace(); err != nil {
		t.Fatalf("a data directory of one's own: %v", err)
	}
	theirsAbove := mk(filepath.Join(mk(filepath.Join(base, "shared"), 0o755, 65534), "cp"), 0o700, 0)
	theirs := mk(filepath.Join(base, "theirs"), 0o700, 65534)
	open := mk(filepath.Join(base, "open"), 0o777, 0)
	link := filepath.Join(base, "link")
	if err := os.Symlink(filepath.Join(base, "mine"), link); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(link, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dir     string
		why     string
		readToo bool // refused to an operator's read as well
	}{
		{theirsAbove, "(uid 65534), who may replace the data directory below it", true},
		{link, "is a symbolic link that belongs to", true},
		{theirs, "(uid 65534), and meshctl runs as", false},
		{open, "has mode 0777: group or others may write it", true},
	} {
		err := Dir(c.dir).CheckPlace()
		if !errors.Is(err, ErrUnprotected) || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%s: %v, want ErrUnprotected saying %q", c.dir, err, c.why)
		}
		if err := Dir(c.dir).CheckPlaceToRead(); (err != nil) != c.readToo {
			t.Errorf("%s read by an operator: %v", c.dir, err)
		}
	}
}
