package apply

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"

	"mesh/host/fstest"
)

// snapshot records everything under dir: for each path its type, mode, owner
// and content (or link target), so a test can show nothing changed.
func snapshot(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		uid, gid := owner(fi)
		desc := fmt.Sprintf("%v %d:%d", fi.Mode(), uid, gid)
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			desc += " -> " + target
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			desc += " " + string(b)
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mustWrite(t testing.TB, p, data string, mode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func assertFile(t testing.TB, p, data string, mode fs.FileMode) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.Mode().IsRegular() {
		t.Fatalf("%s is a %v, want a regular file", p, fi.Mode())
	}
	if got := fi.Mode() & modeBits; got != mode {
		t.Fatalf("%s has mode %v, want %v", p, got, mode)
	}
	b, _ := os.ReadFile(p)
	if string(b) != data {
		t.Fatalf("%s holds %q, want %q", p, b, data)
	}
}

func assertAbsent(t testing.TB, p string) {
	t.Helper()
	if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("%s exists (%v)", p, err)
	}
}

// noTemp fails if a temp file was left anywhere under dir.
func noTemp(t testing.TB, dir string) {
	t.Helper()
	for p := range snapshot(t, dir) {
		if strings.Contains(filepath.Base(p), ".meshhost-") {
			t.Fatalf("temp file %s left behind", p)
		}
	}
}

func TestApplyLifecycle(t *testing.T) {
	root := filepath.Join(t.TempDir(), "managed") // created by Apply
	a := FileApplier{Root: root}
	ctx := context.Background()

	res, err := a.Apply(ctx, []File{
		{Path: "motd", Data: []byte("hello\n"), Mode: 0o644},
		{Path: "etc/app/app.conf", Data: []byte("x=1\n"), Mode: 0o600},
		{Path: "bin/run", Data: []byte("#!/bin/sh\n"), Mode: 0o755},
		{Path: "empty", Data: nil, Mode: 0o640},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Result{
		Written: []string{"bin/run", "empty", "etc/app/app.conf", "motd"},
		Managed: []string{"bin/run", "empty", "etc/app/app.conf", "motd"},
	}
	if !reflect.DeepEqual(res, want) {
		t.Fatalf("first apply: %+v, want %+v", res, want)
	}
	assertFile(t, filepath.Join(root, "motd"), "hello\n", 0o644)
	assertFile(t, filepath.Join(root, "etc/app/app.conf"), "x=1\n", 0o600)
	assertFile(t, filepath.Join(root, "bin/run"), "#!/bin/sh\n", 0o755)
	assertFile(t, filepath.Join(root, "empty"), "", 0o640)
	for _, d := range []string{"", "etc", "etc/app", "bin"} {
		fi, err := os.Stat(filepath.Join(root, d))
		if err != nil || fi.Mode().Perm() != 0o755 {
			t.Fatalf("directory %q: %v %v, want mode 0755", d, fi, err)
		}
	}

	// Same declaration again: nothing written.
	res, err = a.Apply(ctx, []File{
		{Path: "motd", Data: []byte("hello\n"), Mode: 0o644},
		{Path: "etc/app/app.conf", Data: []byte("x=1\n"), Mode: 0o600},
		{Path: "bin/run", Data: []byte("#!/bin/sh\n"), Mode: 0o755},
		{Path: "empty", Data: nil, Mode: 0o640},
	}, res.Managed)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Written) != 0 || len(res.Removed) != 0 || len(res.Unchanged) != 4 {
		t.Fatalf("re-apply: %+v", res)
	}

	// Content change, mode-only change, one dropped, one added.
	res, err = a.Apply(ctx, []File{
		{Path: "motd", Data: []byte("bye\n"), Mode: 0o644},
		{Path: "etc/app/app.conf", Data: []byte("x=1\n"), Mode: 0o640},
		{Path: "empty", Data: nil, Mode: 0o640},
		{Path: "etc/new", Data: []byte("n"), Mode: 0o600},
	}, res.Managed)
	if err != nil {
		t.Fatal(err)
	}
	want = Result{
		Written:   []string{"etc/app/app.conf", "etc/new", "motd"},
		Removed:   []string{"bin/run"},
		Unchanged: []string{"empty"},
		Managed:   []string{"empty", "etc/app/app.conf", "etc/new", "motd"},
	}
	if !reflect.DeepEqual(res, want) {
		t.Fatalf("third apply: %+v, want %+v", res, want)
	}
	assertFile(t, filepath.Join(root, "motd"), "bye\n", 0o644)
	assertFile(t, filepath.Join(root, "etc/app/app.conf"), "x=1\n", 0o640)
	assertAbsent(t, filepath.Join(root, "bin/run"))
	if _, err := os.Stat(filepath.Join(root, "bin")); err != nil {
		t.Fatal("the emptied directory was removed; the documented behaviour is to leave it")
	}

	// Everything dropped; a previous path already gone is no error.
	res, err = a.Apply(ctx, nil, append(res.Managed, "never/was"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res.Removed, []string{"empty", "etc/app/app.conf", "etc/new", "motd"}) || len(res.Managed) != 0 {
		t.Fatalf("removing all: %+v", res)
	}
	for p, d := range snapshot(t, root) {
		if strings.HasPrefix(d, "-") {
			t.Fatalf("file %s left after everything was undeclared", p)
		}
	}
	noTemp(t, root)
}

func TestApplyFileBecomesDirectory(t *testing.T) {
	// "a" was a managed file; now "a/b" is declared. The old file goes first so
	// the directory can take its place.
	root := t.TempDir()
	a := FileApplier{Root: root}
	ctx := context.Background()
	if _, err := a.Apply(ctx, []File{{Path: "a", Data: []byte("file"), Mode: 0o644}}, nil); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, root)

	// First with a failure after the change, to see it undone.
	failing := FileApplier{Root: root, failpoint: func(step, p string) error {
		if step == "write" && p == "z" {
			return syscall.EIO
		}
		return nil
	}}
	_, err := failing.Apply(ctx, []File{{Path: "a/b", Data: []byte("nested"), Mode: 0o644}, {Path: "z", Mode: 0o644}}, []string{"a"})
	var ae *ApplyError
	if !errors.As(err, &ae) || !ae.RolledBack {
		t.Fatalf("got %v", err)
	}
	if after := snapshot(t, root); !reflect.DeepEqual(before, after) {
		t.Fatalf("rollback did not restore the file:\nbefore %v\nafter  %v", before, after)
	}

	res, err := a.Apply(ctx, []File{{Path: "a/b", Data: []byte("nested"), Mode: 0o644}}, []string{"a"})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res.Removed, []string{"a"}) || !reflect.DeepEqual(res.Written, []string{"a/b"}) {
		t.Fatalf("%+v", res)
	}
	assertFile(t, filepath.Join(root, "a/b"), "nested", 0o644)

	// The other way round is refused: the emptied directory stays, and a
	// directory is never replaced by a file.
	_, err = a.Apply(ctx, []File{{Path: "a", Data: []byte("file"), Mode: 0o644}}, []string{"a/b"})
	if !errors.Is(err, ErrInvalidPath) {
		t.Fatalf("got %v", err)
	}
	assertFile(t, filepath.Join(root, "a/b"), "nested", 0o644)
}

func TestApplyModesIgnoreUmask(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	root := t.TempDir()
	files := []File{
		{Path: "a", Data: []byte("a"), Mode: 0o644},
		{Path: "d/b", Data: []byte("b"), Mode: fs.ModeSetuid | 0o755},
		{Path: "c", Data: []byte("c"), Mode: fs.ModeSetgid | 0o750},
		{Path: "e", Data: []byte("e"), Mode: fs.ModeSticky | 0o777},
		{Path: "z", Data: []byte("z"), Mode: 0o400},
	}
	if _, err := (FileApplier{Root: root}).Apply(context.Background(), files, nil); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		assertFile(t, filepath.Join(root, f.Path), string(f.Data), f.Mode)
	}
	// The same special bits written the Unix way, as a mode converted from an
	// octal number would carry them, give the same files: nothing to write.
	unixStyle := []File{
		{Path: "a", Data: []byte("a"), Mode: 0o644},
		{Path: "d/b", Data: []byte("b"), Mode: 0o4755},
		{Path: "c", Data: []byte("c"), Mode: 0o2750},
		{Path: "e", Data: []byte("e"), Mode: 0o1777},
		{Path: "z", Data: []byte("z"), Mode: 0o400},
	}
	res, err := (FileApplier{Root: root}).Apply(context.Background(), unixStyle, nil)
	if err != nil || len(res.Unchanged) != 5 {
		t.Fatalf("Unix-style modes: %+v %v", res, err)
	}
	if fi, _ := os.Stat(filepath.Join(root, "d")); fi.Mode().Perm() != 0o755 {
		t.Fatalf("created directory has mode %v under umask 077, want 0755", fi.Mode().Perm())
	}
}

func TestApplyAdoptsExistingFile(t *testing.T) {
	// A declared path that holds an unmanaged regular file is taken over.
	root := t.TempDir()
	mustWrite(t, filepath.Join(root, "conf"), "local edit", 0o600)
	res, err := (FileApplier{Root: root}).Apply(context.Background(), []File{{Path: "conf", Data: []byte("declared"), Mode: 0o644}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res.Written, []string{"conf"}) {
		t.Fatalf("%+v", res)
	}
	assertFile(t, filepath.Join(root, "conf"), "declared", 0o644)
}

// hostileTree builds a root with links inside and out and a secret outside.
func hostileTree(t testing.TB, base string) (root, outside string) {
	t.Helper()
	root = filepath.Join(base, "root")
	outside = filepath.Join(base, "outside")
	mustWrite(t, filepath.Join(outside, "secret"), "outside", 0o600)
	mustWrite(t, filepath.Join(root, "sub", "inner"), "inner", 0o644)
	mustWrite(t, filepath.Join(root, "plain"), "plain", 0o644)
	for link, target := range map[string]string{
		"out":        "../outside",                 // directory outside, relative
		"abs":        outside,                      // directory outside, absolute
		"in":         "sub",                        // directory inside
		"sub/up":     "..",                         // directory inside, upwards
		"file-out":   "../outside/secret",          // file outside
		"file-in":    "plain",                      // file inside
		"dangling":   "../outside/not-yet-created", // nothing yet, outside
		"sub/inlink": "inner",
	} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(root, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root, outside
}

func TestApplyRefusals(t *testing.T) {
	tests := []struct {
		name     string
		files    []string // declared paths
		previous []string
		mode     fs.FileMode
		want     error
	}{
		{"empty path", []string{""}, nil, 0, ErrInvalidPath},
		{"absolute", []string{"/etc/passwd"}, nil, 0, ErrEscapesRoot},
		{"dot-dot", []string{"../outside/secret"}, nil, 0, ErrEscapesRoot},
		{"dot-dot inside", []string{"sub/../plain"}, nil, 0, ErrEscapesRoot},
		{"dot-dot at end", []string{"sub/.."}, nil, 0, ErrEscapesRoot},
		{"dot", []string{"."}, nil, 0, ErrInvalidPath},
		{"dot prefix", []string{"./plain"}, nil, 0, ErrInvalidPath},
		{"double slash", []string{"sub//x"}, nil, 0, ErrInvalidPath},
		{"trailing slash", []string{"sub/"}, nil, 0, ErrInvalidPath},
		{"NUL", []string{"a\x00b"}, nil, 0, ErrInvalidPath},
		{"long element", []string{strings.Repeat("x", 256)}, nil, 0, ErrInvalidPath},
		{"long path", []string{strings.Repeat("abcdefgh/", 500) + "x"}, nil, 0, ErrInvalidPath},
		{"declared twice", []string{"new", "new"}, nil, 0, ErrInvalidPath},
		{"file and its directory", []string{"x", "x/y"}, nil, 0, ErrInvalidPath},
		{"directory mode", []string{"new"}, nil, fs.ModeDir | 0o755, ErrInvalidMode},
		{"symlink mode", []string{"new"}, nil, fs.ModeSymlink | 0o777, ErrInvalidMode},
		{"link to outside dir", []string{"out/secret"}, nil, 0, ErrEscapesRoot},
		{"link to outside dir, new file", []string{"out/new"}, nil, 0, ErrEscapesRoot},
		{"absolute link", []string{"abs/new"}, nil, 0, ErrEscapesRoot},
		{"link to inside dir", []string{"in/inner"}, nil, 0, ErrEscapesRoot},
		{"upward link inside", []string{"sub/up/plain"}, nil, 0, ErrEscapesRoot},
		{"final link outside", []string{"file-out"}, nil, 0, ErrEscapesRoot},
		{"final link inside", []string{"file-in"}, nil, 0, ErrEscapesRoot},
		{"dangling final link", []string{"dangling"}, nil, 0, ErrEscapesRoot},
		{"directory in the way", []string{"dir"}, nil, 0, ErrInvalidPath},
		{"directory in the way, nested", []string{"sub"}, nil, 0, ErrInvalidPath},
		{"file where a directory is needed", []string{"plain/x"}, nil, 0, ErrInvalidPath},
		{"fifo in the way", []string{"fifo"}, nil, 0, ErrInvalidPath},
		{"good then bad", []string{"good-1", "good-2", "out/x"}, nil, 0, ErrEscapesRoot},
		{"previous escapes", []string{"good"}, []string{"../outside/secret"}, 0, ErrEscapesRoot},
		{"previous absolute", []string{"good"}, []string{"/etc/passwd"}, 0, ErrEscapesRoot},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			root, _ := hostileTree(t, base)
			before := snapshot(t, base)
			var files []File
			for _, p := range tc.files {
				mode := tc.mode
				if mode == 0 {
					mode = 0o644
				}
				files = append(files, File{Path: p, Data: []byte("pwned"), Mode: mode})
			}
			res, err := (FileApplier{Root: root}).Apply(context.Background(), files, tc.previous)
			var pe *PathError
			if !errors.As(err, &pe) {
				t.Fatalf("got %v (%+v), want a *PathError", err, res)
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if strings.Contains(pe.Reason, "symbolic link") && !strings.Contains(pe.Reason, "remove the link on the host") {
				t.Fatalf("a link in the way, and no word of what to do: %v", err)
			}
			for _, other := range []error{ErrEscapesRoot, ErrInvalidPath, ErrInvalidMode, ErrUnknownOwner} {
				if other != tc.want && errors.Is(err, other) {
					t.Fatalf("%v also matches %v", err, other)
				}
			}
			if !reflect.DeepEqual(res, Result{}) {
				t.Fatalf("a refusal came with a result: %+v", res)
			}
			if after := snapshot(t, base); !reflect.DeepEqual(before, after) {
				t.Fatalf("a refused declaration changed the disk:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}

// TestApplyLeavesWhatIsNoLongerAFile: a path a declaration no longer names, where
// something other than a regular file stands now (a directory or a link made by
// hand or by a package, a FIFO, a socket), or with a link or a file in the place
// of a directory on its way, is left as it is and said so in Result.Left, and the
// declaration applies. Before, each such path was refused: the declaration failed
// (apply_failed, tried again forever), and so did every later one, though none
// named the path, with no word of what to do. Nothing is removed or read through a
// link either way, and a declared path is still refused.
func TestApplyLeavesWhatIsNoLongerAFile(t *testing.T) {
	base := t.TempDir()
	root, _ := hostileTree(t, base)
	sock, err := net.Listen("unix", filepath.Join(root, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	a := FileApplier{Root: root}
	ctx := context.Background()
	files := []File{{Path: "good", Data: []byte("good"), Mode: 0o644}}
	previous := []string{"plain/x", "out/secret", "in/inner", "file-out", "dir", "fifo", "sock", "dangling"}
	want := map[string]string{
		"dangling":   "a symbolic link is in its place",
		"dir":        "a directory is in its place",
		"fifo":       "a named pipe is in its place",
		"file-out":   "a symbolic link is in its place",
		"in/inner":   `"in" on its way is a symbolic link`,
		"out/secret": `"out" on its way is a symbolic link`,
		"plain/x":    `"plain" on its way is a file, not a directory`,
		"sock":       "a socket is in its place",
	}
	before := snapshot(t, base)
	if d, err := a.Differs(ctx, files, previous); err != nil || !d {
		t.Fatalf("Differs: %t, %v; want true (good is missing), no error", d, err)
	}
	res, err := a.Apply(ctx, files, previous)
	if err != nil {
		t.Fatalf("a declaration that names none of the paths left: %v", err)
	}
	if !reflect.DeepEqual(res.Managed, []string{"good"}) || !reflect.DeepEqual(res.Written, []string{"good"}) || len(res.Removed) != 0 {
		t.Fatalf("%+v", res)
	}
	var got []string
	for _, l := range res.Left {
		got = append(got, l.Path)
		if !strings.HasPrefix(l.Reason, want[l.Path]) || !strings.Contains(l.Reason, "remove it by hand if nothing needs it") {
			t.Errorf("%s left because %q, want %q and what to do", l.Path, l.Reason, want[l.Path])
		}
	}
	if !slices.IsSorted(got) || len(got) != len(want) {
		t.Errorf("left %v, want each of %v, sorted", got, previous)
	}
	after := snapshot(t, base)
	delete(after, filepath.Join("root", "good"))
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("something other than the declared file changed:\nbefore %v\nafter  %v", before, after)
	}
	// Found as they are, nothing differs: the file check does not apply over and over.
	if d, err := a.Differs(ctx, files, append(previous, "good")); err != nil || d {
		t.Errorf("Differs with only paths left: %t, %v", d, err)
	}

	// The audit's case: a managed file made a directory by hand, then a declaration
	// without it.
	if _, err := a.Apply(ctx, []File{{Path: "etc/old.conf", Data: []byte("x"), Mode: 0o644}}, nil); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(root, "etc", "old.conf")
	os.Remove(old)
	if err := os.Mkdir(old, 0o755); err != nil {
		t.Fatal(err)
	}
	res, err = a.Apply(ctx, []File{{Path: "etc/new.conf", Data: []byte("y"), Mode: 0o644}}, []string{"etc/old.conf"})
	if err != nil || len(res.Left) != 1 || res.Left[0].Path != "etc/old.conf" || !reflect.DeepEqual(res.Managed, []string{"etc/new.conf"}) {
		t.Fatalf("the declaration after etc/old.conf became a directory: %+v, %v", res, err)
	}
	if fi, err := os.Lstat(old); err != nil || !fi.IsDir() {
		t.Fatalf("the directory: %v, %v", fi, err)
	}
	// Declared again, the same directory is still refused, saying what to do.
	_, err = a.Apply(ctx, []File{{Path: "etc/old.conf", Data: []byte("x"), Mode: 0o644}}, []string{"etc/new.conf"})
	if pe := (*PathError)(nil); !errors.As(err, &pe) || pe.Path != "etc/old.conf" || !strings.Contains(err.Error(), "remove the directory") {
		t.Fatalf("declared where a directory is: %v", err)
	}
}

func TestApplyRollbackOnWriteFailure(t *testing.T) {
	root := t.TempDir()
	mustWrite(t, filepath.Join(root, "a"), "old a", 0o600)
	mustWrite(t, filepath.Join(root, "stale"), "stale", 0o644)
	before := snapshot(t, root)

	injected := errors.New("injected write failure")
	a := FileApplier{Root: root, failpoint: func(step, p string) error {
		if step == "write" && p == "m/n/c" {
			return injected
		}
		return nil
	}}
	files := []File{
		{Path: "a", Data: []byte("new a"), Mode: 0o644},     // replaced
		{Path: "b/new", Data: []byte("new b"), Mode: 0o644}, // created, with a directory
		{Path: "m/n/c", Data: []byte("never"), Mode: 0o644}, // fails
		{Path: "z", Data: []byte("after the failure"), Mode: 0o644},
	}
	res, err := a.Apply(context.Background(), files, []string{"a", "stale"})
	var ae *ApplyError
	if !errors.As(err, &ae) {
		t.Fatalf("got %v, want *ApplyError", err)
	}
	if ae.Path != "m/n/c" || !ae.RolledBack || ae.RollbackErr != nil || !errors.Is(err, injected) {
		t.Fatalf("ApplyError %+v", ae)
	}
	if !strings.Contains(err.Error(), "rolled back") {
		t.Fatalf("message does not say the changes were undone: %v", err)
	}
	if !reflect.DeepEqual(res, Result{}) {
		t.Fatalf("failed apply returned %+v", res)
	}
	if after := snapshot(t, root); !reflect.DeepEqual(before, after) {
		t.Fatalf("rollback did not restore the root:\nbefore %v\nafter  %v", before, after)
	}
}

func TestApplyRollbackAfterRename(t *testing.T) {
	// The failure comes after the new file took its name: it must still be
	// undone, for a replaced file and for a new one.
	for _, failing := range []string{"a", "b"} {
		root := t.TempDir()
		mustWrite(t, filepath.Join(root, "a"), "old a", 0o600)
		before := snapshot(t, root)
		fired := false
		a := FileApplier{Root: root, failpoint: func(step, p string) error {
			if step == "syncdir" && p == failing && !fired {
				fired = true // once: the rollback's own rewrite must succeed
				return syscall.EIO
			}
			return nil
		}}
		_, err := a.Apply(context.Background(), []File{
			{Path: "a", Data: []byte("new a"), Mode: 0o644},
			{Path: "b", Data: []byte("new b"), Mode: 0o644},
		}, nil)
		var ae *ApplyError
		if !errors.As(err, &ae) || ae.Path != failing || !ae.RolledBack {
			t.Fatalf("failing %s: got %v", failing, err)
		}
		if after := snapshot(t, root); !reflect.DeepEqual(before, after) {
			t.Fatalf("failing %s: rollback did not restore the root:\nbefore %v\nafter  %v", failing, before, after)
		}
	}
}

func TestApplyRollbackOnRemoveFailure(t *testing.T) {
	root := t.TempDir()
	mustWrite(t, filepath.Join(root, "keep"), "old", 0o644)
	mustWrite(t, filepath.Join(root, "gone-1"), "one", 0o640)
	mustWrite(t, filepath.Join(root, "gone-2"), "two", 0o600)
	before := snapshot(t, root)
	a := FileApplier{Root: root, failpoint: func(step, p string) error {
		if step == "remove" && p == "gone-2" {
			return syscall.EIO
		}
		return nil
	}}
	_, err := a.Apply(context.Background(),
		[]File{{Path: "keep", Data: []byte("new"), Mode: 0o644}, {Path: "fresh", Data: []byte("f"), Mode: 0o644}},
		[]string{"keep", "gone-1", "gone-2"})
	var ae *ApplyError
	if !errors.As(err, &ae) || ae.Path != "gone-2" || !ae.RolledBack || !errors.Is(err, syscall.EIO) {
		t.Fatalf("got %v", err)
	}
	if after := snapshot(t, root); !reflect.DeepEqual(before, after) {
		t.Fatalf("rollback did not restore the root:\nbefore %v\nafter  %v", before, after)
	}
}

func TestApplyRollbackThatFails(t *testing.T) {
	root := t.TempDir()
	mustWrite(t, filepath.Join(root, "a"), "old", 0o644)
	a := FileApplier{Root: root, failpoint: func(step, p string) error {
		switch {
		case step == "write" && p == "b":
			return syscall.EIO
		case step == "rollback" && p == "a":
			return syscall.EROFS
		}
		return nil
	}}
	_, err := a.Apply(context.Background(), []File{
		{Path: "a", Data: []byte("new"), Mode: 0o644},
		{Path: "b", Data: []byte("b"), Mode: 0o644},
	}, nil)
	var ae *ApplyError
	if !errors.As(err, &ae) || ae.RolledBack || !errors.Is(ae.RollbackErr, syscall.EROFS) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("got %#v", err)
	}
	if !strings.Contains(err.Error(), "mixture") {
		t.Fatalf("message does not say the root may be inconsistent: %v", err)
	}
}

func TestApplyContext(t *testing.T) {
	root := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := (FileApplier{Root: root}).Apply(ctx, []File{{Path: "a", Data: []byte("a"), Mode: 0o644}}, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
	assertAbsent(t, filepath.Join(root, "a"))

	// Cancelled part-way: what was written is undone.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	a := FileApplier{Root: root, failpoint: func(step, p string) error {
		if step == "write" && p == "b" {
			cancel() // the next file's check sees it
		}
		return nil
	}}
	_, err = a.Apply(ctx, []File{
		{Path: "a", Data: []byte("a"), Mode: 0o644},
		{Path: "b", Data: []byte("b"), Mode: 0o644},
		{Path: "c", Data: []byte("c"), Mode: 0o644},
	}, nil)
	var ae *ApplyError
	if !errors.As(err, &ae) || ae.Path != "c" || !ae.RolledBack || !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
	for _, p := range []string{"a", "b", "c"} {
		assertAbsent(t, filepath.Join(root, p))
	}
}

func TestApplyChown(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("changing a file's owner needs root")
	}
	root := t.TempDir()
	a := FileApplier{Root: root, Chown: true}
	ctx := context.Background()
	files := []File{{Path: "owned", Data: []byte("x"), Mode: fs.ModeSetuid | 0o750, Owner: "12345", Group: "23456"}}
	if _, err := a.Apply(ctx, files, nil); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Lstat(filepath.Join(root, "owned"))
	if uid, gid := owner(fi); uid != 12345 || gid != 23456 {
		t.Fatalf("owner %d:%d, want 12345:23456", uid, gid)
	}
	// chown clears setuid; the applier sets the mode after it.
	assertFile(t, filepath.Join(root, "owned"), "x", fs.ModeSetuid|0o750)

	res, err := a.Apply(ctx, files, []string{"owned"})
	if err != nil || !reflect.DeepEqual(res.Unchanged, []string{"owned"}) {
		t.Fatalf("re-apply: %+v %v", res, err)
	}
	files[0].Owner = "root"
	res, err = a.Apply(ctx, files, []string{"owned"})
	if err != nil || !reflect.DeepEqual(res.Written, []string{"owned"}) {
		t.Fatalf("owner change: %+v %v", res, err)
	}
	fi, _ = os.Lstat(filepath.Join(root, "owned"))
	if uid, _ := owner(fi); uid != 0 {
		t.Fatalf("owner %d, want root", uid)
	}

	// A failed apply restores the previous owner too.
	before := snapshot(t, root)
	files[0].Owner, files[0].Data = "12345", []byte("y")
	failing := FileApplier{Root: root, Chown: true, failpoint: func(step, p string) error {
		if step == "write" && p == "second" {
			return syscall.EIO
		}
		return nil
	}}
	_, err = failing.Apply(ctx, append(files, File{Path: "second", Mode: 0o644}), []string{"owned"})
	if ae := (*ApplyError)(nil); !errors.As(err, &ae) || !ae.RolledBack {
		t.Fatalf("got %v", err)
	}
	if after := snapshot(t, root); !reflect.DeepEqual(before, after) {
		t.Fatalf("rollback did not restore ownership:\nbefore %v\nafter  %v", before, after)
	}
}

// TestApplyKeepsAnOwnerNotDeclared: a managed file given to the app's user (by a
// package, by hand, or by an earlier declaration that named an owner), declared
// with no owner or group, stays the app's when its content or mode changes, as it
// does while it is unchanged. Before, the rewrite was a new file of the agent's
// (root's): a 0640 configuration the app had read became root's at its next
// change of content, and the app could no longer read it, though the declaration
// promised to leave the owner alone. A new file is the agent's user's; a declared
// owner or group is applied as before; without Chown nothing changed.
func TestApplyKeepsAnOwnerNotDeclared(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("changing a file's owner needs root")
	}
	root := t.TempDir()
	a := FileApplier{Root: root, Chown: true}
	ctx := context.Background()
	p := filepath.Join(root, "etc", "app.conf")
	mustWrite(t, p, "v1", 0o640)
	if err := os.Chown(p, 12345, 23456); err != nil {
		t.Fatal(err)
	}
	ownerIs := func(what string, uid, gid int) {
		t.Helper()
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if u, g := owner(fi); u != uid || g != gid {
			t.Errorf("%s: owner %d:%d, want %d:%d", what, u, g, uid, gid)
		}
	}
	applyAs := func(f File, want string) {
		t.Helper()
		f.Path = "etc/app.conf"
		res, err := a.Apply(ctx, []File{f}, []string{"etc/app.conf"})
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(res.Written, res.Unchanged); got != want {
			t.Errorf("%+v: written, unchanged %s, want %s", f, got, want)
		}
	}
	applyAs(File{Data: []byte("v1"), Mode: 0o640}, "[] [etc/app.conf]")
	ownerIs("unchanged", 12345, 23456)
	applyAs(File{Data: []byte("v2"), Mode: 0o640}, "[etc/app.conf] []")
	ownerIs("new content", 12345, 23456)
	assertFile(t, p, "v2", 0o640)
	applyAs(File{Data: []byte("v2"), Mode: 0o600}, "[etc/app.conf] []")
	ownerIs("new mode", 12345, 23456)
	// Found as declared, owner and all: nothing differs.
	if d, err := a.Differs(ctx, []File{{Path: "etc/app.conf", Data: []byte("v2"), Mode: 0o600}}, []string{"etc/app.conf"}); err != nil || d {
		t.Errorf("Differs: %t, %v", d, err)
	}
	// One declared, the other kept.
	applyAs(File{Data: []byte("v3"), Mode: 0o600, Group: "0"}, "[etc/app.conf] []")
	ownerIs("group declared", 12345, 0)
	applyAs(File{Data: []byte("v4"), Mode: 0o600, Owner: "0"}, "[etc/app.conf] []")
	ownerIs("owner declared", 0, 0)

	// A new file is the agent's.
	if _, err := a.Apply(ctx, []File{{Path: "new.conf", Data: []byte("n"), Mode: 0o644}}, nil); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(filepath.Join(root, "new.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if u, g := owner(fi); u != os.Geteuid() || g != os.Getegid() {
		t.Errorf("a new file: owner %d:%d, want the agent's", u, g)
	}

	// Without Chown, a rewrite is the agent's, as the doc says.
	if err := os.Chown(p, 12345, 23456); err != nil {
		t.Fatal(err)
	}
	if _, err := (FileApplier{Root: root}).Apply(ctx, []File{{Path: "etc/app.conf", Data: []byte("v5"), Mode: 0o600}}, []string{"etc/app.conf"}); err != nil {
		t.Fatal(err)
	}
	ownerIs("without Chown", os.Geteuid(), os.Getegid())
}

func TestApplyUnknownOwner(t *testing.T) {
	root := t.TempDir()
	for _, f := range []File{
		{Path: "x", Mode: 0o644, Owner: "no-such-user-meshhost"},
		{Path: "x", Mode: 0o644, Group: "no-such-group-meshhost"},
	} {
		_, err := (FileApplier{Root: root, Chown: true}).Apply(context.Background(), []File{f}, nil)
		if !errors.Is(err, ErrUnknownOwner) {
			t.Fatalf("got %v", err)
		}
		// Without Chown the names are not looked at.
		if _, err := (FileApplier{Root: root}).Apply(context.Background(), []File{f}, nil); err != nil {
			t.Fatalf("Chown false: %v", err)
		}
		os.Remove(filepath.Join(root, "x"))
	}
}

// TestApplyFullDisk writes onto a small tmpfs until it is full and checks that
// the error is ENOSPC and the files written before it are restored.
func TestApplyFullDisk(t *testing.T) {
	root := fstest.Small(t, fstest.Options{})
	mustWrite(t, filepath.Join(root, "a"), "old a", 0o644)
	before := snapshot(t, root)
	_, err := (FileApplier{Root: root}).Apply(context.Background(), []File{
		{Path: "a", Data: []byte("new a"), Mode: 0o600},
		{Path: "deep/er/big", Data: make([]byte, 128<<10), Mode: 0o644},
	}, []string{"a"})
	var ae *ApplyError
	if !errors.As(err, &ae) || ae.Path != "deep/er/big" || !ae.RolledBack || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("got %v", err)
	}
	if after := snapshot(t, root); !reflect.DeepEqual(before, after) {
		t.Fatalf("rollback did not restore the root:\nbefore %v\nafter  %v", before, after)
	}
}

func TestApplyReadOnlyDirectory(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes into read-only directories; the failpoint and full-disk tests cover rollback")
	}
	root := t.TempDir()
	mustWrite(t, filepath.Join(root, "a"), "old", 0o644)
	mustWrite(t, filepath.Join(root, "ro", "x"), "x", 0o644)
	if err := os.Chmod(filepath.Join(root, "ro"), 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(filepath.Join(root, "ro"), 0o755) })
	before := snapshot(t, root)
	_, err := (FileApplier{Root: root}).Apply(context.Background(), []File{
		{Path: "a", Data: []byte("new"), Mode: 0o644},
		{Path: "ro/x", Data: []byte("y"), Mode: 0o644},
	}, nil)
	var ae *ApplyError
	if !errors.As(err, &ae) || ae.Path != "ro/x" || !ae.RolledBack || !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("got %v", err)
	}
	if after := snapshot(t, root); !reflect.DeepEqual(before, after) {
		t.Fatalf("rollback did not restore the root:\nbefore %v\nafter  %v", before, after)
	}
}

// TestApplyWriteRefusedBeforeTheRename fails the write of a file before its new
// content takes its name, as a read-only or full file system does, where writing
// the old content back fails alike. Before, the rollback rewrote that file anyway,
// failed, and the error said the managed files might be a mixture of old and new
// when nothing had changed (seen on a managed root mounted read-only).
func TestApplyWriteRefusedBeforeTheRename(t *testing.T) {
	root := t.TempDir()
	mustWrite(t, filepath.Join(root, "a"), "old a", 0o644)
	mustWrite(t, filepath.Join(root, "ro", "x"), "old x", 0o644)
	before := snapshot(t, root)
	a := FileApplier{Root: root, failpoint: func(step, p string) error {
		if step == "create" && p == "ro/x" {
			return syscall.EROFS
		}
		return nil
	}}
	_, err := a.Apply(context.Background(), []File{
		{Path: "a", Data: []byte("new a"), Mode: 0o644},
		{Path: "ro/x", Data: []byte("new x"), Mode: 0o644},
	}, nil)
	var ae *ApplyError
	if !errors.As(err, &ae) || ae.Path != "ro/x" || !errors.Is(err, syscall.EROFS) {
		t.Fatalf("got %v", err)
	}
	if !ae.RolledBack || ae.RollbackErr != nil {
		t.Fatalf("the rollback failed (%v): %v", ae.RollbackErr, err)
	}
	if after := snapshot(t, root); !reflect.DeepEqual(before, after) {
		t.Fatalf("rollback did not restore the root:\nbefore %v\nafter  %v", before, after)
	}
}

// TestApplyRefusesAModeTheAgentCannotReadBack declares files without the owner's
// read bit to an applier that is not root (Chown false). Before, it wrote them,
// and every later apply failed opening them ("permission denied"), the declaration
// that wrote them included, until someone changed their mode by hand. As root
// (Chown true) permissions do not stop the agent, and such modes are applied.
func TestApplyRefusesAModeTheAgentCannotReadBack(t *testing.T) {
	for _, mode := range []fs.FileMode{0, 0o200, 0o044, 0o300} {
		root := t.TempDir()
		before := snapshot(t, root)
		files := []File{{Path: "a", Data: []byte("a"), Mode: 0o644}, {Path: "etc/secret", Data: []byte("s"), Mode: mode}}
		_, err := (FileApplier{Root: root}).Apply(context.Background(), files, nil)
		var pe *PathError
		if !errors.As(err, &pe) || pe.Path != "etc/secret" || !errors.Is(err, ErrUnreadableMode) {
			t.Fatalf("mode %#o: got %v, want a refusal of etc/secret", mode, err)
		}
		if !strings.Contains(err.Error(), "owner's read bit") {
			t.Errorf("mode %#o: the refusal does not say what to declare: %v", mode, err)
		}
		if after := snapshot(t, root); !reflect.DeepEqual(before, after) {
			t.Fatalf("mode %#o: the refused apply changed the root:\nbefore %v\nafter  %v", mode, before, after)
		}
	}
	if os.Geteuid() != 0 {
		return
	}
	root := t.TempDir()
	files := []File{{Path: "etc/secret", Data: []byte("s"), Mode: 0o200}}
	for i := 0; i < 2; i++ {
		if _, err := (FileApplier{Root: root, Chown: true}).Apply(context.Background(), files, []string{"etc/secret"}); err != nil {
			t.Fatalf("as root, apply %d: %v", i+1, err)
		}
	}
}

// TestTheSweepReadsADirectoryInBatches: the leftovers of a killed apply are found
// among many other names (another user may fill a directory of the root others may
// write in), past the first batch of names the sweep reads: it reads a directory
// sweepBatch names at a time, not whole (a local audit saw the agent grow by 21 MB
// for 65,000 names; see docs/benchmarks.md for the batched sweep's figure).
func TestTheSweepReadsADirectoryInBatches(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "shared")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	n := 8 * sweepBatch
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("other-%06d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var leftovers []string
	for i := range 3 {
		p := filepath.Join(dir, fmt.Sprintf(".meshhost-%016x", i))
		mustWrite(t, p, "half of a declared file", 0o600)
		leftovers = append(leftovers, p)
	}
	files := []File{{Path: "shared/a", Data: []byte("a"), Mode: 0o644}}
	if _, err := (FileApplier{Root: root}).Apply(context.Background(), files, nil); err != nil {
		t.Fatal(err)
	}
	for _, p := range leftovers {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("a leftover among %d names is still there (%v)", n, err)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != n+1 {
		t.Errorf("%d names left in the directory, want the %d others and the declared file", len(entries), n)
	}
}

// TestApplyRemovesAKilledApplysTemporaryFiles finds the temporary file an apply
// killed between creating and renaming it leaves (seen after a SIGKILL of the agent
// during a 1000-file declaration). Before, nothing ever removed it. The next apply
// that writes in its directory does; a declared file of such a name, and other
// names, stay.
func TestApplyRemovesAKilledApplysTemporaryFiles(t *testing.T) {
	root := t.TempDir()
	leftover := filepath.Join(root, "etc", ".meshhost-0123456789abcdef")
	mustWrite(t, leftover, "half of a declared file", 0o600)
	mustWrite(t, filepath.Join(root, "etc", ".meshhost-notes"), "not ours", 0o644)
	elsewhere := filepath.Join(root, "var", ".meshhost-00000000000000ff")
	mustWrite(t, elsewhere, "in a directory this apply does not write in", 0o600)
	files := []File{
		{Path: "etc/a", Data: []byte("a"), Mode: 0o644},
		{Path: "etc/.meshhost-fedcba9876543210", Data: []byte("declared"), Mode: 0o644},
	}
	if _, err := (FileApplier{Root: root}).Apply(context.Background(), files, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(leftover); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the leftover temporary file is still there (%v)", err)
	}
	for _, keep := range []string{"etc/.meshhost-notes", "etc/.meshhost-fedcba9876543210", "var/.meshhost-00000000000000ff", "etc/a"} {
		if _, err := os.Lstat(filepath.Join(root, keep)); err != nil {
			t.Errorf("%s: %v", keep, err)
		}
	}
	// Declared and written already: applied again, it is kept and unchanged.
	res, err := (FileApplier{Root: root}).Apply(context.Background(), append(files, File{Path: "etc/b", Data: []byte("b"), Mode: 0o644}), []string{"etc/a", "etc/.meshhost-fedcba9876543210"})
	if err != nil || !slices.Contains(res.Unchanged, "etc/.meshhost-fedcba9876543210") {
		t.Fatalf("applied again: %+v, %v", res, err)
	}
	// A directory an apply only removes from is swept too (the leftover of a kill
	// there stayed for good when no later declaration wrote in it).
	mustWrite(t, filepath.Join(root, "var", "old"), "managed before", 0o644)
	if _, err := (FileApplier{Root: root}).Apply(context.Background(), files, []string{"etc/a", "etc/.meshhost-fedcba9876543210", "var/old"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(elsewhere); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the leftover in a directory the apply only removed from is still there (%v)", err)
	}
}

// TestApplyRemovesALeftoverWhereNothingIsWritten: an apply killed before the
// rename of a new file leaves its temporary file (up to MaxFileSize of declared
// content) in a directory where the next Apply may neither write nor remove: the
// path dropped by the next declaration (the file never made, nothing to remove), or
// declared again with the content already there (nothing to write). The Apply
// sweeps those directories too. Not a link with the temporary name, nor what
// stands outside the directories of declared and managed paths.
func TestApplyRemovesALeftoverWhereNothingIsWritten(t *testing.T) {
	for _, tc := range []struct {
		name     string
		files    []File
		previous []string // other/c.conf: recorded before the killed apply made it
	}{
		{"the path dropped", []File{{Path: "etc/a.conf", Data: []byte("a"), Mode: 0o644}},
			[]string{"etc/a.conf", "other/c.conf"}},
		{"declared again as it is", []File{
			{Path: "etc/a.conf", Data: []byte("a"), Mode: 0o644},
			{Path: "other/b.conf", Data: []byte("b"), Mode: 0o644},
		}, []string{"etc/a.conf", "other/b.conf", "other/c.conf"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			mustWrite(t, filepath.Join(root, "etc/a.conf"), "a", 0o644)
			if len(tc.files) > 1 {
				mustWrite(t, filepath.Join(root, "other/b.conf"), "b", 0o644)
			}
			leftover := filepath.Join(root, "other", ".meshhost-0123456789abcdef")
			mustWrite(t, leftover, "a secret declared for other/c.conf", 0o600)
			target := filepath.Join(root, "target")
			mustWrite(t, target, "not the applier's", 0o600)
			link := filepath.Join(root, "other", ".meshhost-00000000000000ff")
			if err := os.Symlink(target, link); err != nil {
				t.Fatal(err)
			}
			elsewhere := filepath.Join(root, "var", ".meshhost-fedcba9876543210")
			mustWrite(t, elsewhere, "in no directory of a managed path", 0o600)

			res, err := (FileApplier{Root: root, Guard: &RootGuard{}}).Apply(context.Background(), tc.files, tc.previous)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Written)+len(res.Removed) != 0 {
				t.Fatalf("wrote %v, removed %v", res.Written, res.Removed)
			}
			if _, err := os.Lstat(leftover); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the killed apply's temporary file is still there (%v)", err)
			}
			if fi, err := os.Lstat(link); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
				t.Errorf("the link with a temporary name: %v, %v", fi, err)
			}
			assertFile(t, target, "not the applier's", 0o600)
			assertFile(t, elsewhere, "in no directory of a managed path", 0o600)
		})
	}
}

func TestApplyNoRoot(t *testing.T) {
	if _, err := (FileApplier{}).Apply(context.Background(), nil, nil); err == nil {
		t.Fatal("an applier without a root applied")
	}
	// Root is a file.
	f := filepath.Join(t.TempDir(), "file")
	mustWrite(t, f, "", 0o644)
	if _, err := (FileApplier{Root: f}).Apply(context.Background(), nil, nil); err == nil {
		t.Fatal("a file as the root was accepted")
	}
}

func TestResultIsSorted(t *testing.T) {
	root := t.TempDir()
	var files []File
	for _, p := range []string{"z", "a/b", "m", "a/a", "b"} {
		files = append(files, File{Path: p, Data: []byte(p), Mode: 0o644})
	}
	res, err := (FileApplier{Root: root}).Apply(context.Background(), files, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.IsSorted(res.Written) || !slices.IsSorted(res.Managed) || len(res.Managed) != 5 {
		t.Fatalf("%+v", res)
	}
}

// TestApplyNewDirectorySwappedForALink: a local user who may write in the managed
// root swaps a link in for a directory the applier has just made, aiming at a file
// declared 0600. The mode the new directory needs (umask 077 narrowed it) is set
// only on the directory the applier made, never through the link: the apply fails,
// undone, and the file keeps its mode. Another user's directory, or one that is not
// empty, swapped in is refused likewise. By name, the chmod followed the link and
// made the file readable by everyone.
func TestApplyNewDirectorySwappedForALink(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	for _, swap := range []struct {
		name string
		do   func(t *testing.T, root, dir string)
	}{
		{"a link to a secret file", func(t *testing.T, root, dir string) {
			if err := os.Symlink("secrets/key", dir); err != nil {
				t.Fatal(err)
			}
		}},
		{"a directory that is not empty", func(t *testing.T, root, dir string) {
			if err := os.Rename(filepath.Join(root, "secrets"), dir); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(swap.name, func(t *testing.T) {
			root := t.TempDir()
			secret := File{Path: "secrets/key", Data: []byte("TOPSECRET"), Mode: 0o600}
			if _, err := (FileApplier{Root: root}).Apply(context.Background(), []File{secret}, nil); err != nil {
				t.Fatal(err)
			}
			// Its owner keeps the secrets' directory closed: the mode a new
			// directory needs is not the one it has.
			if err := os.Chmod(filepath.Join(root, "secrets"), 0o700); err != nil {
				t.Fatal(err)
			}
			swapped := false
			a := FileApplier{Root: root, failpoint: func(step, p string) error {
				if step == "mkdir" && p == "new" && !swapped {
					swapped = true
					dir := filepath.Join(root, "new")
					if err := os.Rename(dir, filepath.Join(root, "moved")); err != nil {
						t.Fatal(err)
					}
					swap.do(t, root, dir)
				}
				return nil
			}}
			_, err := a.Apply(context.Background(), []File{secret, {Path: "new/x", Data: []byte("x"), Mode: 0o644}}, []string{"secrets/key"})
			if !swapped {
				t.Fatal("the failpoint never ran")
			}
			key := filepath.Join(root, "secrets/key")
			if swap.name != "a link to a secret file" {
				key = filepath.Join(root, "new/key")
				if fi, err := os.Stat(filepath.Dir(key)); err != nil || fi.Mode().Perm() != 0o700 {
					t.Fatalf("the directory swapped in: %v, %v; want its mode 0700 kept", fi.Mode(), err)
				}
			}
			if fi, err := os.Stat(key); err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("the secret file: %v, %v; want mode 0600 kept", fi.Mode(), err)
			}
			if err == nil || !strings.Contains(err.Error(), "replaced") {
				t.Fatalf("Apply with the new directory swapped: %v, want a refusal saying it was replaced", err)
			}
		})
	}
}

// TestApplyDirectoryToFileSaysWhatToDo moves a declared file's place from inside a
// directory the applier made to the directory's own name. The applier never
// replaces a directory by a file; before, its refusal said only that a directory
// was in the way, and the node failed every attempt with no word of what to do.
func TestApplyDirectoryToFileSaysWhatToDo(t *testing.T) {
	root := t.TempDir()
	a := FileApplier{Root: root}
	if _, err := a.Apply(context.Background(), []File{{Path: "r/x/y", Data: []byte("y"), Mode: 0o644}}, nil); err != nil {
		t.Fatal(err)
	}
	_, err := a.Apply(context.Background(), []File{{Path: "r/x", Data: []byte("x"), Mode: 0o644}}, []string{"r/x/y"})
	var pe *PathError
	if !errors.As(err, &pe) || pe.Path != "r/x" || !strings.Contains(err.Error(), "remove the directory") {
		t.Fatalf("got %v", err)
	}
	if err := os.RemoveAll(filepath.Join(root, "r", "x")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Apply(context.Background(), []File{{Path: "r/x", Data: []byte("x"), Mode: 0o644}}, []string{"r/x/y"}); err != nil {
		t.Fatalf("with the directory removed: %v", err)
	}
}

// TestApplyDirectorySwappedForALinkInsideTheRoot: a local user who may write one
// directory of the managed root (shared/) swaps a link to another directory of the
// root (../etc, root's) in for the directory of a declared path, between the
// inspection and the step. Each step goes through the directory the agent opened one
// name at a time without following a link, so the write into shared/sub and the
// removal of shared/sub/app.conf are refused and undone, and etc/ is untouched. By
// name, os.Root followed the link, which stays inside the root: the user's file
// replaced etc/app.conf (declared owner: the user, in a root-only directory), and a
// removal took etc/app.conf away.
func TestApplyDirectorySwappedForALinkInsideTheRoot(t *testing.T) {
	for _, step := range []string{"write", "remove"} {
		t.Run(step, func(t *testing.T) {
			root := t.TempDir()
			mustWrite(t, filepath.Join(root, "etc/app.conf"), "root's", 0o644)
			managed := []string{"etc/app.conf"}
			files := []File{{Path: "etc/app.conf", Data: []byte("root's"), Mode: 0o644}}
			if step == "write" {
				if err := os.MkdirAll(filepath.Join(root, "shared/sub"), 0o755); err != nil {
					t.Fatal(err)
				}
				files = append(files, File{Path: "shared/sub/app.conf", Data: []byte("the user's"), Mode: 0o644})
			} else {
				mustWrite(t, filepath.Join(root, "shared/sub/app.conf"), "the user's", 0o644)
				managed = append(managed, "shared/sub/app.conf")
			}
			swapped := false
			a := FileApplier{Root: root, failpoint: func(s, p string) error {
				if s == step && p == "shared/sub/app.conf" && !swapped {
					swapped = true
					if err := os.Rename(filepath.Join(root, "shared/sub"), filepath.Join(root, "shared/moved")); err != nil {
						t.Fatal(err)
					}
					if err := os.Symlink("../etc", filepath.Join(root, "shared/sub")); err != nil {
						t.Fatal(err)
					}
				}
				return nil
			}}
			_, err := a.Apply(context.Background(), files, managed)
			if !swapped {
				t.Fatal("the failpoint never ran")
			}
			if !errors.Is(err, ErrEscapesRoot) {
				t.Errorf("got %v, want the apply refused (ErrEscapesRoot)", err)
			}
			assertFile(t, filepath.Join(root, "etc/app.conf"), "root's", 0o644)
		})
	}
}

// TestApplyUpperDirectorySwappedForALink: the directory swapped for a link is not
// the one the file is in but one above it (shared/, of shared/sub/app.conf), the
// link leading to another tree holding a sub/ of its own. The steps go through the
// descriptor of the sub/ the agent opened, which moved with shared/: they cannot
// be redirected, but the file would not be at its path (nor would the one removed
// be the one at it). The path of each directory written in is checked from the
// root down before the first step in it, so the apply fails and is undone, and
// neither tree holds a file the agent wrote or lost one.
func TestApplyUpperDirectorySwappedForALink(t *testing.T) {
	for _, step := range []string{"write", "remove"} {
		t.Run(step, func(t *testing.T) {
			root := t.TempDir()
			mustWrite(t, filepath.Join(root, "other/sub/app.conf"), "the other tree's", 0o644)
			files := []File{{Path: "etc/app.conf", Data: []byte("root's"), Mode: 0o644}}
			managed := []string{"etc/app.conf"}
			mustWrite(t, filepath.Join(root, "etc/app.conf"), "root's", 0o644)
			if step == "write" {
				if err := os.MkdirAll(filepath.Join(root, "shared/sub"), 0o755); err != nil {
					t.Fatal(err)
				}
				files = append(files, File{Path: "shared/sub/app.conf", Data: []byte("declared"), Mode: 0o644})
			} else {
				mustWrite(t, filepath.Join(root, "shared/sub/app.conf"), "managed", 0o644)
				managed = append(managed, "shared/sub/app.conf")
			}
			swapped := false
			a := FileApplier{Root: root, failpoint: func(s, p string) error {
				if s == step && p == "shared/sub/app.conf" && !swapped {
					swapped = true
					if err := os.Rename(filepath.Join(root, "shared"), filepath.Join(root, "moved")); err != nil {
						t.Fatal(err)
					}
					if err := os.Symlink("other", filepath.Join(root, "shared")); err != nil {
						t.Fatal(err)
					}
				}
				return nil
			}}
			_, err := a.Apply(context.Background(), files, managed)
			if !swapped {
				t.Fatal("the failpoint never ran")
			}
			var ae *ApplyError
			if !errors.Is(err, ErrEscapesRoot) || !errors.As(err, &ae) || !ae.RolledBack {
				t.Fatalf("got %v, want the apply refused (ErrEscapesRoot) and undone", err)
			}
			assertFile(t, filepath.Join(root, "other/sub/app.conf"), "the other tree's", 0o644)
			if step == "write" {
				assertAbsent(t, filepath.Join(root, "moved/sub/app.conf"))
			} else {
				assertFile(t, filepath.Join(root, "moved/sub/app.conf"), "managed", 0o644)
			}
			assertFile(t, filepath.Join(root, "etc/app.conf"), "root's", 0o644)
		})
	}
}

// TestADirectoryIsSweptOncePerRoot: with a RootGuard, which the agent keeps for its
// life, the leftovers of an interrupted apply are removed from a directory at the
// first Apply that writes there, and not looked for again at every later one (three
// reads of its names a declaration): only an apply cut off with its process leaves
// one, and the next process sweeps. A new guard, as a restarted agent has, sweeps
// again; so does the same guard once it has accepted another root.
func TestADirectoryIsSweptOncePerRoot(t *testing.T) {
	root := filepath.Join(t.TempDir(), "managed")
	leftover := filepath.Join(root, "etc", ".meshhost-0123456789abcdef")
	mustWrite(t, leftover, "half of a declared file", 0o600)
	g := &RootGuard{}
	apply := func(g *RootGuard, n int) {
		t.Helper()
		files := []File{{Path: "etc/a", Data: []byte(fmt.Sprint(n)), Mode: 0o644}}
		if n == 5 {
			files[0].Path = "var/a"
		}
		if _, err := (FileApplier{Root: root, Guard: g}).Apply(context.Background(), files, []string{"etc/a"}); err != nil {
			t.Fatal(err)
		}
	}
	apply(g, 1)
	assertAbsent(t, leftover)
	// Made by hand, not by a crash: left until the next process.
	mustWrite(t, leftover, "not a crash's", 0o600)
	apply(g, 2)
	assertFile(t, leftover, "not a crash's", 0o600)
	apply(&RootGuard{}, 3)
	assertAbsent(t, leftover)

	// Another root accepted (removed by hand, made again by an Apply that writes
	// elsewhere in it): swept again.
	mustWrite(t, leftover, "again", 0o600)
	apply(g, 4)
	assertFile(t, leftover, "again", 0o600)
	if err := os.RemoveAll(root); err != nil {
		t.Fatal(err)
	}
	apply(g, 5)
	mustWrite(t, leftover, "in the new root", 0o600)
	apply(g, 6)
	assertAbsent(t, leftover)
}

// TestARollbackThatFailsEverywhereIsSaidShortly: a rollback that cannot restore any
// of thousands of paths names the first few and counts the rest; one line a path,
// an apply out of descriptors made a text of 21 MB, logged whole and too large for
// the applied state to be saved.
func TestARollbackThatFailsEverywhereIsSaidShortly(t *testing.T) {
	root := t.TempDir()
	var files []File
	for i := range 200 {
		files = append(files, File{Path: fmt.Sprintf("d%03d/f", i), Data: []byte("x"), Mode: 0o644})
	}
	last := files[len(files)-1].Path
	a := FileApplier{Root: root, failpoint: func(step, p string) error {
		switch {
		case step == "write" && p == last:
			return errors.New("out of descriptors")
		case step == "rollback":
			return errors.New("cannot restore")
		}
		return nil
	}}
	_, err := a.Apply(context.Background(), files, nil)
	var ae *ApplyError
	if !errors.As(err, &ae) || ae.RolledBack {
		t.Fatalf("got %v, want an ApplyError whose rollback failed", err)
	}
	if msg := err.Error(); len(msg) > 4096 || !strings.Contains(msg, "more paths not restored") {
		t.Fatalf("the error is %d bytes, want the first few paths and a count:\n%.600s", len(msg), msg)
	}
}

// TestApplyKeepsFewDirectoriesOpen: a declaration whose files each sit in
// directories of their own keeps at most maxOpenDirs of them open, closing others
// and opening them again (one name at a time) when needed, and writes every file;
// it opened all of them, and a deep tree ran out of descriptors (EMFILE) part way.
func TestApplyKeepsFewDirectoriesOpen(t *testing.T) {
	root := t.TempDir()
	var files []File
	for i := range 60 {
		files = append(files, File{Path: fmt.Sprintf("a%02d/b/c/f", i), Data: []byte(fmt.Sprint(i)), Mode: 0o644})
	}
	most := 0
	a := FileApplier{Root: root, maxOpenDirs: 8}
	a.failpoint = func(step, p string) error {
		if entries, err := os.ReadDir("/proc/self/fd"); err == nil && len(entries) > most {
			most = len(entries)
		}
		return nil
	}
	before, _ := os.ReadDir("/proc/self/fd")
	if _, err := a.Apply(context.Background(), files, nil); err != nil {
		t.Fatal(err)
	}
	for i, f := range files {
		assertFile(t, filepath.Join(root, f.Path), fmt.Sprint(i), 0o644)
	}
	// Each open handle holds a directory and, to write in it, a Root: about twice
	// the bound, with some to spare for the files being written.
	if before != nil && most-len(before) > 2*8+8 {
		t.Errorf("%d descriptors open at most during the apply (%d before): the handles are not bounded", most, len(before))
	}
	// Applied again, unchanged: every directory looked at again, the bound held.
	var managed []string
	for _, f := range files {
		managed = append(managed, f.Path)
	}
	if _, err := a.Apply(context.Background(), files, managed); err != nil {
		t.Fatal(err)
	}
}

// TestNumericIDsAsTheFormatTakesThem: a numeric owner or group is taken up to
// 4294967294, as the declaration format allows (31 bits were, and 3000000000 was
// "not a user on this machine"); 4294967295 is chown's "leave it", never an id.
func TestNumericIDsAsTheFormatTakesThem(t *testing.T) {
	none := func(string) (string, error) { return "", errors.New("no such user") }
	for s, want := range map[string]int{"0": 0, "1000": 1000, "2147483648": 2147483648, "3000000000": 3000000000, "4294967294": 4294967294} {
		if got, err := resolveID(s, none); err != nil || got != want {
			t.Errorf("%s: %d, %v", s, got, err)
		}
	}
	if _, err := resolveID("4294967295", none); err == nil {
		t.Error("4294967295 (chown's -1) taken as an id")
	}
	if _, err := resolveID("svc", func(string) (string, error) { return "4294967295", nil }); err == nil {
		t.Error("a name whose id is 4294967295 taken")
	}
}

// TestDiffersOnlyLooks: Differs says whether Apply would change the root (a content,
// a mode, a missing file or directory, a file no longer declared) and writes
// nothing, a missing root included.
func TestDiffersOnlyLooks(t *testing.T) {
	root := filepath.Join(t.TempDir(), "managed")
	a := FileApplier{Root: root}
	ctx := context.Background()
	files := []File{{Path: "etc/app.conf", Data: []byte("x=1\n"), Mode: 0o644}, {Path: "motd", Data: []byte("hi\n"), Mode: 0o644}}
	if d, err := a.Differs(ctx, files, nil); err != nil || !d {
		t.Fatalf("no root yet: %t, %v", d, err)
	}
	if _, err := os.Stat(root); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Differs made the root: %v", err)
	}
	if _, err := a.Apply(ctx, files, nil); err != nil {
		t.Fatal(err)
	}
	if d, err := a.Differs(ctx, files, []string{"etc/app.conf", "motd"}); err != nil || d {
		t.Fatalf("as declared: %t, %v", d, err)
	}
	for name, change := range map[string]func(){
		"content":      func() { os.WriteFile(filepath.Join(root, "motd"), []byte("edited\n"), 0o644) },
		"mode":         func() { os.Chmod(filepath.Join(root, "motd"), 0o600) },
		"removed file": func() { os.Remove(filepath.Join(root, "motd")) },
		"removed dir":  func() { os.RemoveAll(filepath.Join(root, "etc")) },
		"no longer declared": func() {
			os.WriteFile(filepath.Join(root, "old.conf"), []byte("old\n"), 0o644)
		},
	} {
		if _, err := a.Apply(ctx, files, []string{"etc/app.conf", "motd", "old.conf"}); err != nil {
			t.Fatal(err)
		}
		change()
		before := snapshot(t, root)
		d, err := a.Differs(ctx, files, []string{"etc/app.conf", "motd", "old.conf"})
		if err != nil || !d {
			t.Errorf("%s: Differs %t, %v", name, d, err)
		}
		if after := snapshot(t, root); !reflect.DeepEqual(before, after) {
			t.Errorf("%s: Differs changed the root:\n%v\n%v", name, before, after)
		}
	}
}
