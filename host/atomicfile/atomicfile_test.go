package atomicfile

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"mesh/host/fstest"
)

// entries lists the names in dir, so tests can show no temp file was left.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

func TestWriteFileCreatesAndReplaces(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f.json")
	for i, tc := range []struct {
		data []byte
		perm fs.FileMode
	}{
		{[]byte("first"), 0o600},
		{[]byte("second, longer than the first"), 0o644},
		{nil, 0o640},
		{[]byte("x"), 0o755},
	} {
		if err := WriteFile(p, tc.data, tc.perm); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		got, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, tc.data) {
			t.Fatalf("write %d: content %q, want %q", i, got, tc.data)
		}
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != tc.perm {
			t.Fatalf("write %d: mode %v, want %v", i, fi.Mode().Perm(), tc.perm)
		}
		if names := entries(t, dir); len(names) != 1 || names[0] != "f.json" {
			t.Fatalf("write %d: directory holds %v, want only f.json", i, names)
		}
	}
}

func TestWriteFileIgnoresUmask(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	p := filepath.Join(t.TempDir(), "f")
	if err := WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v, want 0644 despite umask 077", fi.Mode().Perm())
	}
}

func TestCreateExclusive(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "identity.json")
	if err := CreateExclusive(p, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", fi.Mode().Perm())
	}
	if n := fi.Sys().(*syscall.Stat_t).Nlink; n != 1 {
		t.Fatalf("file has %d links; the temp name was not removed", n)
	}

	err = CreateExclusive(p, []byte("two"), 0o644)
	if !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second CreateExclusive: %v, want an error wrapping fs.ErrExist", err)
	}
	if !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("error %v does not wrap the errno", err)
	}
	got, _ := os.ReadFile(p)
	if string(got) != "one" {
		t.Fatalf("existing file changed to %q", got)
	}
	fi, _ = os.Stat(p)
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("existing file's mode changed to %v", fi.Mode().Perm())
	}
	if names := entries(t, dir); len(names) != 1 {
		t.Fatalf("directory holds %v, want only identity.json", names)
	}
}

func TestCreateExclusiveRefusesDanglingSymlink(t *testing.T) {
	// A dangling link is something in the way, not an absence: following it
	// would create a file wherever the link points.
	dir := t.TempDir()
	p := filepath.Join(dir, "identity.json")
	target := filepath.Join(dir, "elsewhere")
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
	if err := CreateExclusive(p, []byte("x"), 0o600); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("got %v, want fs.ErrExist", err)
	}
	if _, err := os.Lstat(target); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the link's target was created: %v", err)
	}
}

func TestMissingDirectory(t *testing.T) {
	p := filepath.Join(t.TempDir(), "no", "such", "f")
	for name, fn := range map[string]func(string, []byte, fs.FileMode) error{
		"WriteFile": WriteFile, "CreateExclusive": CreateExclusive,
	} {
		err := fn(p, []byte("x"), 0o600)
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: %v, want fs.ErrNotExist", name, err)
		}
		var pe *fs.PathError
		if !errors.As(err, &pe) {
			t.Errorf("%s: %v does not wrap *fs.PathError", name, err)
		}
	}
}

func TestTrailingSlashRefused(t *testing.T) {
	if err := WriteFile(t.TempDir()+"/", []byte("x"), 0o600); err == nil {
		t.Fatal("writing to a directory path succeeded")
	}
}

func TestRenameOverDirectoryFails(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "d")
	if err := os.Mkdir(p, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p, "inside"), []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("x"), 0o600); err == nil {
		t.Fatal("replacing a non-empty directory succeeded")
	}
	if names := entries(t, dir); len(names) != 1 || names[0] != "d" {
		t.Fatalf("directory holds %v, want only d", names)
	}
	if got, _ := os.ReadFile(filepath.Join(p, "inside")); string(got) != "keep" {
		t.Fatal("the directory's content changed")
	}
}

// TestInjectedFailures fails each step in turn and checks the contract: the
// error wraps the cause, no temp file remains, and the previous file is intact
// (except after the final directory flush, when the new content is in place).
func TestInjectedFailures(t *testing.T) {
	steps := map[bool][]string{
		false: {"write", "sync", "chmod", "close", "rename", "syncdir"},
		true:  {"write", "sync", "chmod", "close", "link", "syncdir"},
	}
	for _, exclusive := range []bool{false, true} {
		for _, step := range steps[exclusive] {
			name := step
			if exclusive {
				name = "exclusive/" + step
			}
			t.Run(name, func(t *testing.T) {
				dir := t.TempDir()
				p := filepath.Join(dir, "f")
				if !exclusive {
					if err := os.WriteFile(p, []byte("old"), 0o640); err != nil {
						t.Fatal(err)
					}
				}
				cause := &fs.PathError{Op: step, Path: p, Err: syscall.EIO}
				h := &hooks{before: func(s string) error {
					if s == step {
						return cause
					}
					return nil
				}}
				err := write(p, []byte("new"), 0o600, exclusive, h)
				if !errors.Is(err, syscall.EIO) {
					t.Fatalf("got %v, want an error wrapping EIO", err)
				}
				var pe *fs.PathError
				if !errors.As(err, &pe) {
					t.Fatalf("%v does not wrap *fs.PathError", err)
				}
				names := entries(t, dir)
				if step == "syncdir" {
					// The new name is in place; only durability is in doubt.
					if got, _ := os.ReadFile(p); string(got) != "new" {
						t.Fatalf("after a directory flush failure the file holds %q", got)
					}
					if len(names) != 1 {
						t.Fatalf("directory holds %v, want only f", names)
					}
					return
				}
				if exclusive {
					if len(names) != 0 {
						t.Fatalf("directory holds %v after a failed exclusive create", names)
					}
					return
				}
				if len(names) != 1 || names[0] != "f" {
					t.Fatalf("directory holds %v, want only f", names)
				}
				if got, _ := os.ReadFile(p); string(got) != "old" {
					t.Fatalf("previous file changed to %q", got)
				}
				if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o640 {
					t.Fatalf("previous file's mode changed to %v", fi.Mode().Perm())
				}
			})
		}
	}
}

func TestReadOnlyDirectory(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root ignores directory permissions; TestInjectedFailures and TestFullDisk cover the failure paths")
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o755) })
	err := WriteFile(p, []byte("new"), 0o600)
	if !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("got %v, want fs.ErrPermission", err)
	}
	if got, _ := os.ReadFile(p); string(got) != "old" {
		t.Fatalf("previous file changed to %q", got)
	}
}

// TestFullDisk fills a small tmpfs and shows that ENOSPC reaches the caller and
// that the previous file survives.
func TestFullDisk(t *testing.T) {
	dir := smallTmpfs(t)
	p := filepath.Join(dir, "identity.json")
	if err := WriteFile(p, []byte("previous"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Fill what remains.
	filler, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 4096)
	for {
		if _, err := filler.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling the disk: %v", err)
			}
			break
		}
	}
	filler.Close()

	big := bytes.Repeat([]byte("n"), 32<<10)
	for name, fn := range map[string]func(string, []byte, fs.FileMode) error{
		"WriteFile": WriteFile, "CreateExclusive": CreateExclusive,
	} {
		target := p
		if name == "CreateExclusive" {
			target = filepath.Join(dir, "new.json")
		}
		err := fn(target, big, 0o600)
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("%s on a full disk: %v, want ENOSPC", name, err)
		}
		if !strings.Contains(err.Error(), "no space left") {
			t.Errorf("%s: message %q does not say the disk is full", name, err)
		}
	}
	if got, _ := os.ReadFile(p); string(got) != "previous" {
		t.Fatalf("previous file changed to %q", got)
	}
	names := entries(t, dir)
	if len(names) != 2 {
		t.Fatalf("directory holds %v, want identity.json and filler only", names)
	}
}

// smallTmpfs mounts a 64 KiB tmpfs and returns its path, or skips the test with
// the reason it cannot.
func smallTmpfs(t *testing.T) string {
	t.Helper()
	return fstest.Small(t, fstest.Options{})
}

// TestRemoveStale: the temporary files writes killed part way left are removed,
// and nothing else: not the files, not a temporary-looking name that is not one
// createTemp makes, not a directory.
func TestRemoveStale(t *testing.T) {
	dir := t.TempDir()
	stale := []string{".identity.json.tmp-792982105", ".applied.state.tmp-1"}
	kept := []string{"identity.json", ".identity.json.tmp-", ".identity.json.tmp-12x", ".tmp-123", "notes.tmp-12", "applied.state"}
	for _, name := range append(append([]string{}, stale...), kept...) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, ".dir.tmp-5"), 0o700); err != nil {
		t.Fatal(err)
	}
	// A write's temporary file looks like the stale ones: the name is createTemp's.
	f, tmp, err := createTemp(dir, "revoked.json")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	stale = append(stale, filepath.Base(tmp))

	removed, err := RemoveStale(dir)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	slices.Sort(stale)
	if !slices.Equal(removed, stale) {
		t.Fatalf("removed %v, want %v", removed, stale)
	}
	for _, name := range append(kept, ".dir.tmp-5") {
		if _, err := os.Lstat(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s was removed: %v", name, err)
		}
	}
}
