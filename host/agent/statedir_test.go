//go:build unix

package agent

import (
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"mesh/host/identity"
	"mesh/host/statedir"
)

// TestNewRefusesAStateDirectoryOthersControl: the agent will not start from a state
// directory another user owns or group or others may write, nor from an identity file
// that is a link; from its own it starts.
func TestNewRefusesAStateDirectoryOthersControl(t *testing.T) {
	newAgent := func(dir string) error {
		a, err := New(Options{StateDir: dir, Root: filepath.Join(dir, "managed"), Logger: slog.New(slog.DiscardHandler)})
		if a != nil {
			a.kp.Wipe()
		}
		return err
	}
	t.Run("its own", func(t *testing.T) {
		f := newFixture(t)
		if err := newAgent(f.dir); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("group-writable", func(t *testing.T) {
		f := newFixture(t)
		if err := os.Chmod(f.dir, 0o770); err != nil {
			t.Fatal(err)
		}
		if err := newAgent(f.dir); !errors.Is(err, statedir.ErrUnsafe) {
			t.Fatalf("got %v, want statedir.ErrUnsafe", err)
		}
	})
	t.Run("another user's", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("giving the directory to another user (chown to 65534) needs root")
		}
		f := newFixture(t)
		if err := os.Chown(f.dir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if err := newAgent(f.dir); !errors.Is(err, statedir.ErrUnsafe) {
			t.Fatalf("got %v, want statedir.ErrUnsafe", err)
		}
	})
	t.Run("a symlinked identity", func(t *testing.T) {
		f, theirs := newFixture(t), newFixture(t)
		if err := os.Remove(identity.Path(f.dir)); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(identity.Path(theirs.dir), identity.Path(f.dir)); err != nil {
			t.Fatal(err)
		}
		if err := newAgent(f.dir); !errors.Is(err, statedir.ErrSymlink) {
			t.Fatalf("got %v, want statedir.ErrSymlink", err)
		}
	})
}

// TestNewRefusesAManagedRootOthersControl: the agent writes what the mesh declares
// in the managed root, as root: it will not start when another user could replace a
// directory above it (and aim those writes anywhere), nor when its state directory
// is inside it, where a declared file could replace the keys the node trusts.
func TestNewRefusesAManagedRootOthersControl(t *testing.T) {
	newAgent := func(dir, root string) error {
		a, err := New(Options{StateDir: dir, Root: root, Logger: slog.New(slog.DiscardHandler)})
		if a != nil {
			a.kp.Wipe()
		}
		return err
	}
	f := newFixture(t)
	if err := newAgent(f.dir, filepath.Join(t.TempDir(), "not", "yet", "root")); err != nil {
		t.Fatalf("a root not made yet, under the agent's own directories: %v", err)
	}
	shared := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(shared, 0o777)
	if err := newAgent(f.dir, filepath.Join(shared, "root")); !errors.Is(err, statedir.ErrUnsafePath) {
		t.Fatalf("a root in a directory others may write: %v, want statedir.ErrUnsafePath", err)
	}
	if err := newAgent(f.dir, filepath.Dir(f.dir)); !errors.Is(err, ErrStateInRoot) {
		t.Fatalf("the state directory inside the root: %v, want ErrStateInRoot", err)
	}
	if err := newAgent(f.dir, f.dir); !errors.Is(err, ErrStateInRoot) {
		t.Fatalf("the state directory as the root: %v, want ErrStateInRoot", err)
	}
}

// TestAStateDirectoryInTheRootUnderAnotherNameIsRefused: a state directory reached
// through a second name of the root that no link explains (a bind mount here;
// another letter case on a file system that folds it) is inside the root, where a
// declaration could replace identity.json.
func TestAStateDirectoryInTheRootUnderAnotherNameIsRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to bind-mount the managed root under a second name")
	}
	base := t.TempDir()
	root, alias := filepath.Join(base, "root"), filepath.Join(base, "alias")
	for _, d := range []string{filepath.Join(root, "state"), alias} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("mount", "--bind", root, alias).CombinedOutput(); err != nil {
		t.Skipf("cannot bind-mount here (%v: %s)", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", alias).Run() })
	for _, state := range []string{alias, filepath.Join(alias, "state"), filepath.Join(alias, "new")} {
		if err := CheckApart(state, root); !errors.Is(err, ErrStateInRoot) {
			t.Errorf("--state %s --root %s (the same directory): %v, want ErrStateInRoot", state, root, err)
		}
	}
	if err := CheckApart(filepath.Join(base, "state"), root); err != nil {
		t.Errorf("a state directory beside the root and its second name: %v, want it taken", err)
	}
}
