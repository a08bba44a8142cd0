//go:build unix

package statedir

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// nobody is the uid files are given to stand for another user's.
const nobody = 65534

// asRoot skips a test that needs to give a file to another user.
func asRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("giving a file to another user (chown to 65534) needs root")
	}
}

func TestCheckAcceptsTheAgentsOwnDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := Check(dir); err != nil {
		t.Fatalf("a 0700 directory of this user's: %v", err)
	}
	// Read-only for group and others is still only this user's to change.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Check(dir); err != nil {
		t.Fatalf("a 0755 directory of this user's: %v", err)
	}
	if err := Check(filepath.Join(dir, "absent")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("an absent directory: %v, want fs.ErrNotExist", err)
	}
}

func TestCheckRefusesWritableByOthers(t *testing.T) {
	for _, mode := range []fs.FileMode{0o770, 0o720, 0o707, 0o702, 0o777, 0o1777} {
		t.Run(mode.String(), func(t *testing.T) {
			dir := t.TempDir()
			if err := os.Chmod(dir, mode); err != nil {
				t.Fatal(err)
			}
			err := Check(dir)
			var ue *UnsafeError
			if !errors.As(err, &ue) || !errors.Is(err, ErrUnsafe) || ue.UID != os.Geteuid() {
				t.Fatalf("mode %v: %v, want an *UnsafeError", mode, err)
			}
			for _, want := range []string{dir, fmt.Sprintf("mode %#o", mode.Perm()), "group or others may write it", "chmod 700 " + dir, "nothing was read"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the refusal does not say %q: %v", want, err)
				}
			}
			if errors.Is(err, ErrSymlink) || errors.Is(err, ErrNotOwned) {
				t.Errorf("%v matches another kind", err)
			}
		})
	}
}

func TestCheckRefusesAnotherUsersDirectory(t *testing.T) {
	asRoot(t)
	dir := t.TempDir()
	if err := os.Chown(dir, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	err := Check(dir)
	var ue *UnsafeError
	if !errors.As(err, &ue) || ue.UID != nobody || ue.EUID != 0 {
		t.Fatalf("a directory of uid %d: %v, want an *UnsafeError", nobody, err)
	}
	for _, want := range []string{"uid 65534", "chown 0 " + dir} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q: %v", want, err)
		}
	}
}

func TestCheckRefusesAFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Check(p); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("a file as the state directory: %v", err)
	}
	if err := Prepare(filepath.Join(p, "sub")); err == nil {
		t.Fatal("Prepare made a directory under a file")
	}
}

func TestPrepare(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "state")
	if err := Prepare(dir); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("made %v, %v; want mode 0700", fi, err)
	}
	if err := os.Chmod(dir, 0o775); err != nil {
		t.Fatal(err)
	}
	if err := Prepare(dir); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("an existing group-writable directory: %v", err)
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o775 {
		t.Fatalf("Prepare changed the mode to %v: it must refuse, not repair", fi.Mode().Perm())
	}
}

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "identity.json")
	if err := os.WriteFile(file, []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Run("this user's regular file", func(t *testing.T) {
		f, fi, err := Open(file)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if data, _ := io.ReadAll(f); string(data) != "mine" || fi.Size() != 4 {
			t.Fatalf("read %q, size %d", data, fi.Size())
		}
	})
	t.Run("absent", func(t *testing.T) {
		if _, _, err := Open(filepath.Join(dir, "absent")); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%v, want fs.ErrNotExist", err)
		}
	})
	for name, target := range map[string]string{
		"a link to a file of this user's": file,
		"a link to another identity":      "/tmp/elsewhere/identity.json",
		"a dangling link":                 "gone",
	} {
		t.Run(name, func(t *testing.T) {
			link := filepath.Join(t.TempDir(), "identity.json")
			if err := os.Symlink(target, link); err != nil {
				t.Fatal(err)
			}
			_, _, err := Open(link)
			var fe *FileError
			if !errors.As(err, &fe) || !errors.Is(err, ErrSymlink) || fe.Path != link {
				t.Fatalf("%v, want a *FileError of ErrSymlink", err)
			}
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrNotOwned) || errors.Is(err, ErrUnsafe) {
				t.Fatalf("%v matches another kind", err)
			}
			if !strings.Contains(err.Error(), "is a symbolic link") || !strings.Contains(err.Error(), "ls -l "+link) {
				t.Fatalf("the refusal does not say what it is and what to do: %v", err)
			}
		})
	}
	t.Run("a directory", func(t *testing.T) {
		d := filepath.Join(t.TempDir(), "identity.json")
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if _, _, err := Open(d); !errors.Is(err, syscall.EISDIR) {
			t.Fatalf("%v, want EISDIR", err)
		}
	})
	t.Run("a FIFO, without waiting for a writer", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "identity.json")
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Skipf("cannot make a FIFO here: %v", err)
		}
		if _, _, err := Open(p); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("%v, want a refusal of what is not a regular file", err)
		}
	})
	t.Run("another user's file", func(t *testing.T) {
		asRoot(t)
		p := filepath.Join(t.TempDir(), "identity.json")
		if err := os.WriteFile(p, []byte("theirs"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, nobody, nobody); err != nil {
			t.Fatal(err)
		}
		_, _, err := Open(p)
		var fe *FileError
		if !errors.As(err, &fe) || !errors.Is(err, ErrNotOwned) || fe.UID != nobody || errors.Is(err, ErrSymlink) {
			t.Fatalf("%v, want a *FileError of ErrNotOwned", err)
		}
		if !strings.Contains(err.Error(), "uid "+strconv.Itoa(nobody)) || !strings.Contains(err.Error(), "chown 0 "+p) {
			t.Fatalf("the refusal does not say whose it is and what to do: %v", err)
		}
	})
}
