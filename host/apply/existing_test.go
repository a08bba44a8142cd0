package apply

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sparse makes p a file of a huge size that uses no disk, as `truncate -s 8T`
// does, and returns its size: 8 TiB, or less where the file system caps a
// file's size lower, but always far past MaxFileSize.
func sparse(t testing.TB, p string) int64 {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, size := range []int64{8 << 40, 1 << 40, 16 << 30} {
		err := os.Truncate(p, size)
		if err == nil {
			return size
		}
		if errors.Is(err, fs.ErrNotExist) {
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if err = os.Truncate(p, size); err == nil {
				return size
			}
		}
		if !errors.Is(err, syscall.EFBIG) && !errors.Is(err, syscall.EINVAL) {
			t.Fatal(err)
		}
	}
	t.Skip("this file system takes no sparse file past 16 GiB")
	return 0
}

// fileFacts describes p without reading its content: a huge file must not be
// read by the test either.
func fileFacts(t testing.TB, p string) string {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		return err.Error()
	}
	return fi.Mode().String() + " " + fi.ModTime().Format(time.RFC3339Nano) + " " + sizeText(fi.Size())
}

// TestApplyRefusesHugeExistingFile: a sparse file of terabytes at a declared
// path is refused by its size, as its own kind of refusal, before anything is
// written; the applier is not brought down, and applies once the file is gone.
func TestApplyRefusesHugeExistingFile(t *testing.T) {
	root := t.TempDir()
	mustWrite(t, filepath.Join(root, "etc/a.conf"), "old a", 0o644)
	mustWrite(t, filepath.Join(root, "keep"), "not managed", 0o600)
	size := sparse(t, filepath.Join(root, "etc/big.conf"))
	before := map[string]string{}
	for _, p := range []string{"etc/a.conf", "keep", "etc/big.conf", "stale"} {
		before[p] = fileFacts(t, filepath.Join(root, p))
	}
	files := []File{
		{Path: "etc/a.conf", Data: []byte("new a"), Mode: 0o644},
		{Path: "etc/big.conf", Data: []byte("small now"), Mode: 0o644},
		{Path: "new", Data: []byte("new"), Mode: 0o644},
	}
	a := FileApplier{Root: root}
	res, err := a.Apply(context.Background(), files, []string{"etc/a.conf", "etc/big.conf"})
	var pe *PathError
	if !errors.As(err, &pe) || !errors.Is(err, ErrTooLarge) || pe.Path != "etc/big.conf" {
		t.Fatalf("got %v (%+v), want a *PathError of ErrTooLarge for etc/big.conf", err, res)
	}
	for _, other := range []error{ErrEscapesRoot, ErrInvalidPath, ErrInvalidMode, ErrUnknownOwner} {
		if errors.Is(err, other) {
			t.Fatalf("%v also matches %v", err, other)
		}
	}
	for _, want := range []string{sizeText(size), sizeText(MaxFileSize), "nothing was changed", "move it out of the managed root, or stop declaring it"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q: %v", want, err)
		}
	}
	if !reflect.DeepEqual(res, Result{}) {
		t.Fatalf("a refusal came with a result: %+v", res)
	}
	for p, was := range before {
		if now := fileFacts(t, filepath.Join(root, p)); now != was {
			t.Errorf("%s changed: %s -> %s", p, was, now)
		}
	}
	assertFile(t, filepath.Join(root, "etc/a.conf"), "old a", 0o644)
	assertAbsent(t, filepath.Join(root, "new"))
	noTempByName(t, root)

	// Moved away, the same declaration applies.
	if err := os.Rename(filepath.Join(root, "etc/big.conf"), filepath.Join(t.TempDir(), "big")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Apply(context.Background(), files, []string{"etc/a.conf", "etc/big.conf"}); err != nil {
		t.Fatalf("after the file was moved away: %v", err)
	}
	assertFile(t, filepath.Join(root, "etc/big.conf"), "small now", 0o644)
	assertFile(t, filepath.Join(root, "etc/a.conf"), "new a", 0o644)
}

// TestApplyRefusesHugeStaleFile: a huge file at a path no longer declared, which
// the applier would remove (keeping its content to restore it), is refused the
// same way, with what to do about a file that is no longer declared.
func TestApplyRefusesHugeStaleFile(t *testing.T) {
	root := t.TempDir()
	mustWrite(t, filepath.Join(root, "a"), "a", 0o644)
	sparse(t, filepath.Join(root, "old/huge"))
	before := fileFacts(t, filepath.Join(root, "old/huge"))
	_, err := (FileApplier{Root: root}).Apply(context.Background(),
		[]File{{Path: "a", Data: []byte("b"), Mode: 0o644}}, []string{"a", "old/huge"})
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "no longer declared") {
		t.Fatalf("got %v, want ErrTooLarge saying the file is no longer declared", err)
	}
	if now := fileFacts(t, filepath.Join(root, "old/huge")); now != before {
		t.Fatalf("the huge file changed: %s -> %s", before, now)
	}
	assertFile(t, filepath.Join(root, "a"), "a", 0o644)
}

// TestApplyExistingFileAtTheLimit: a file of exactly MaxFileSize is read (and
// restored when the apply fails); one byte more is refused.
func TestApplyExistingFileAtTheLimit(t *testing.T) {
	root := t.TempDir()
	full := strings.Repeat("x", MaxFileSize)
	mustWrite(t, filepath.Join(root, "full"), full, 0o644)
	mustWrite(t, filepath.Join(root, "over"), full+"y", 0o644)

	injected := errors.New("injected")
	a := FileApplier{Root: root, failpoint: func(step, p string) error {
		if step == "write" && p == "z" {
			return injected
		}
		return nil
	}}
	_, err := a.Apply(context.Background(), []File{
		{Path: "full", Data: []byte("replaced"), Mode: 0o600},
		{Path: "z", Data: nil, Mode: 0o644},
	}, nil)
	var ae *ApplyError
	if !errors.As(err, &ae) || !ae.RolledBack || !errors.Is(err, injected) {
		t.Fatalf("got %v, want the injected failure, rolled back", err)
	}
	assertFile(t, filepath.Join(root, "full"), full, 0o644)

	_, err = (FileApplier{Root: root}).Apply(context.Background(), []File{{Path: "over", Data: nil, Mode: 0o644}}, nil)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), sizeText(MaxFileSize+1)) {
		t.Fatalf("a file one byte over the limit: %v", err)
	}
	if _, err := (FileApplier{Root: root}).Apply(context.Background(), []File{{Path: "full", Data: nil, Mode: 0o644}}, nil); err != nil {
		t.Fatalf("a file at the limit: %v", err)
	}
}

// TestApplyRefusesDeclaredTooLarge: the applier never writes a file it would
// refuse to read back on the next apply.
func TestApplyRefusesDeclaredTooLarge(t *testing.T) {
	root := t.TempDir()
	_, err := (FileApplier{Root: root}).Apply(context.Background(), []File{
		{Path: "ok", Data: make([]byte, MaxFileSize), Mode: 0o644},
		{Path: "big", Data: make([]byte, MaxFileSize+1), Mode: 0o644},
	}, nil)
	var pe *PathError
	if !errors.As(err, &pe) || !errors.Is(err, ErrTooLarge) || pe.Path != "big" || !strings.Contains(err.Error(), "declare less") {
		t.Fatalf("got %v", err)
	}
	assertAbsent(t, filepath.Join(root, "ok"))
}

// TestApplySymlinkSwappedIn: a regular file that a local process replaces with
// a symbolic link just before the applier opens it is never followed nor removed:
// at a declared path it is refused as a link and nothing is written; at a path no
// longer declared it is left in place (Result.Left) and the declaration applies.
func TestApplySymlinkSwappedIn(t *testing.T) {
	for _, declared := range []bool{true, false} {
		name := map[bool]string{true: "declared", false: "no longer declared"}[declared]
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			mustWrite(t, filepath.Join(root, "etc/app.conf"), "mine", 0o644)
			// The link stays in the directory, and its target holds what is declared:
			// followed, the file would look unchanged and the link would stay.
			mustWrite(t, filepath.Join(root, "etc/target"), "declared", 0o644)
			a := FileApplier{Root: root, failpoint: func(step, p string) error {
				if step == "inspect" && p == "etc/app.conf" {
					swapForLink(t, filepath.Join(root, p), "target")
				}
				return nil
			}}
			files := []File{{Path: "other", Data: []byte("x"), Mode: 0o644}}
			if declared {
				files = append(files, File{Path: "etc/app.conf", Data: []byte("declared"), Mode: 0o644})
			}
			res, err := a.Apply(context.Background(), files, []string{"etc/app.conf"})
			if declared {
				var pe *PathError
				if !errors.As(err, &pe) || !errors.Is(err, ErrEscapesRoot) || pe.Path != "etc/app.conf" {
					t.Fatalf("got %v, want the symbolic-link refusal", err)
				}
				assertAbsent(t, filepath.Join(root, "other"))
			} else {
				if err != nil || len(res.Left) != 1 || res.Left[0].Path != "etc/app.conf" || !strings.Contains(res.Left[0].Reason, "symbolic link") {
					t.Fatalf("got %+v, %v; want the link left in place", res, err)
				}
				assertFile(t, filepath.Join(root, "other"), "x", 0o644)
			}
			if target, err := os.Readlink(filepath.Join(root, "etc/app.conf")); err != nil || target != "target" {
				t.Fatalf("the link is gone or changed: %q, %v", target, err)
			}
			assertFile(t, filepath.Join(root, "etc/target"), "declared", 0o644)
		})
	}
}

// noTempByName is noTemp without reading the files: a huge one among them must
// not be read by the test either.
func noTempByName(t testing.TB, dir string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err == nil && strings.Contains(filepath.Base(p), ".meshhost-") {
			t.Errorf("temp file %s left behind", p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// swapForLink replaces the file p with a symbolic link to target, atomically.
func swapForLink(t testing.TB, p, target string) {
	t.Helper()
	tmp := p + ".swap"
	if err := os.Symlink(target, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
}

// TestReadExistingByName: the way of reading a file found at a managed path
// where it cannot be opened without following a link at its name refuses a link
// swapped in after it looked, a huge file, and reads an ordinary one.
func TestReadExistingByName(t *testing.T) {
	root := t.TempDir()
	mustWrite(t, filepath.Join(root, "a"), "a", 0o640)
	mustWrite(t, filepath.Join(root, "b"), "b", 0o644)
	mustWrite(t, filepath.Join(root, "target"), "t", 0o644)
	sparse(t, filepath.Join(root, "huge"))
	r, err := os.OpenRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	run := &run{a: FileApplier{Root: root, failpoint: func(step, p string) error {
		if step == "open" && p == "b" {
			swapForLink(t, filepath.Join(root, "b"), "target")
		}
		return nil
	}}}
	got, err := run.readExistingByName(r, "a", "a", true)
	if err != nil || string(got.data) != "a" || got.mode != 0o640 {
		t.Fatalf("an ordinary file: %+v, %v", got, err)
	}
	if got, err := run.readExistingByName(r, "none", "none", true); got != nil || err != nil {
		t.Fatalf("nothing there: %+v, %v", got, err)
	}
	if _, err := run.readExistingByName(r, "b", "b", true); !errors.Is(err, ErrEscapesRoot) {
		t.Fatalf("a link swapped in: %v", err)
	}
	if _, err := run.readExistingByName(r, "huge", "huge", true); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a huge file: %v", err)
	}
}

// TestReadCapped: reading stops at the limit whatever the file does meanwhile.
func TestReadCapped(t *testing.T) {
	// reader serves content in reads of at most chunk bytes, then the end.
	reader := func(content []byte, chunk int, end error) func([]byte) (int, error) {
		return func(b []byte) (int, error) {
			if len(content) == 0 {
				return 0, end
			}
			n := copy(b[:min(len(b), chunk)], content)
			content = content[n:]
			return n, nil
		}
	}
	big := make([]byte, MaxFileSize+5000)
	for _, c := range []struct {
		name    string
		content []byte
		size    int64 // as fstat said
		chunk   int
		end     error
		want    int
		err     error
	}{
		{"as stated", []byte("hello"), 5, 1 << 20, io.EOF, 5, nil},
		{"end as read(2) says it", []byte("hello"), 5, 1 << 20, nil, 5, nil},
		{"short reads", []byte("hello"), 5, 1, nil, 5, nil},
		{"empty", nil, 0, 1 << 20, nil, 0, nil},
		{"shrank", []byte("hi"), 5, 1 << 20, nil, 2, nil},
		{"grew a little", []byte("hello, world"), 5, 1 << 20, nil, 12, nil},
		{"grew past the limit", big, 5, 1 << 20, nil, 0, errGrew},
		{"grew past the limit in small reads", big, 5, 4096, nil, 0, errGrew},
		{"at the limit", big[:MaxFileSize], MaxFileSize, 1 << 20, nil, MaxFileSize, nil},
		{"over the limit though stated at it", big[:MaxFileSize+1], MaxFileSize, 1 << 20, nil, 0, errGrew},
		{"a negative size", []byte("x"), -1, 1 << 20, nil, 1, nil},
		{"a read error", []byte("x"), 5, 1 << 20, syscall.EIO, 0, syscall.EIO},
	} {
		t.Run(c.name, func(t *testing.T) {
			read := reader(c.content, c.chunk, c.end)
			total := 0
			counting := func(b []byte) (int, error) {
				if len(b) == 0 {
					t.Fatal("a read of nothing was asked for")
				}
				n, err := read(b)
				total += n
				return n, err
			}
			got, err := readCapped(counting, c.size)
			if !errors.Is(err, c.err) || len(got) != c.want {
				t.Fatalf("got %d bytes, %v; want %d, %v", len(got), err, c.want, c.err)
			}
			if total > MaxFileSize+1 {
				t.Fatalf("read %d bytes, more than the limit and the byte that shows it is passed", total)
			}
		})
	}
}

func TestSizeText(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 bytes", 1023: "1023 bytes", 1024: "1024 bytes (1.0 KiB)",
		MaxFileSize: "524288 bytes (512.0 KiB)", 8 << 40: "8796093022208 bytes (8.0 TiB)",
		1<<63 - 1: "9223372036854775807 bytes (8.0 EiB)",
	} {
		if got := sizeText(n); got != want {
			t.Errorf("sizeText(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestDiffersReadsOnlyFilesOfTheDeclaredSize: the file check (Differs) reads a file
// it finds only if its size is the declared content's. A local user who may write
// in the managed root, putting a file of the largest size the applier reads at
// each managed path, made every check (each minute) hold all of them, up to
// MaxFileSize a path: 512 MiB for a thousand files. A file of the declared size is
// still compared, and found as declared or not.
func TestDiffersReadsOnlyFilesOfTheDeclaredSize(t *testing.T) {
	root := t.TempDir()
	a := FileApplier{Root: root}
	ctx := context.Background()
	var files []File
	var previous []string
	for i := range 24 {
		p := fmt.Sprintf("etc/%02d.conf", i)
		files = append(files, File{Path: p, Data: []byte("x=1\n"), Mode: 0o644})
		previous = append(previous, p, fmt.Sprintf("old/%02d.conf", i))
	}
	if _, err := a.Apply(ctx, files, nil); err != nil {
		t.Fatal(err)
	}
	for _, p := range previous {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		err := os.Truncate(filepath.Join(root, p), MaxFileSize)
		if errors.Is(err, fs.ErrNotExist) {
			mustWrite(t, filepath.Join(root, p), "", 0o644)
			err = os.Truncate(filepath.Join(root, p), MaxFileSize)
		}
		if err != nil {
			// Empty files would make "did not read them" hold for nothing.
			t.Fatal(err)
		}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	d, err := a.Differs(ctx, files, previous)
	runtime.ReadMemStats(&after)
	if err != nil || !d {
		t.Fatalf("Differs: %t, %v", d, err)
	}
	if got, read := after.TotalAlloc-before.TotalAlloc, uint64(len(previous))*MaxFileSize; got > read/8 {
		t.Errorf("Differs allocated %s for %d files of %s that cannot be as declared: it read them",
			sizeText(int64(got)), len(previous), sizeText(MaxFileSize))
	}

	// Of the declared size, a file is compared.
	if _, err := a.Apply(ctx, files, previous); err != nil {
		t.Fatal(err)
	}
	if d, err := a.Differs(ctx, files, previous); err != nil || d {
		t.Fatalf("as declared: %t, %v", d, err)
	}
	mustWrite(t, filepath.Join(root, "etc/07.conf"), "x=2\n", 0o644)
	if d, err := a.Differs(ctx, files, previous); err != nil || !d {
		t.Fatalf("another content of the same size: %t, %v", d, err)
	}
}
