//go:build unix

package agent

import (
	"errors"
	"log/slog"
	"os"
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
