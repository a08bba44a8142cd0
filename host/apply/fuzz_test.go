package apply

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// FuzzApplyPaths declares files at arbitrary paths, and removes arbitrary
// previous paths, in a root full of links that lead out of it and around it.
// Whatever the paths, nothing outside the root may change, no link may be
// written through or removed, and a successful Apply must leave exactly the
// declared content at each declared path.
func FuzzApplyPaths(f *testing.F) {
	for _, s := range []string{
		"a", "a/b/c", "../x", "/etc/passwd", "out/secret", "in/inner", "sub/up/plain",
		"file-out", "dangling", "dir", "fifo", "plain/x", "a\nb\n../c", "sub/../../outside/secret",
		"./a", "a//b", "a/", "", ".", "..", "abs/x", "sub/inlink", "x\x00y",
	} {
		f.Add(s, s)
	}
	base := fuzzDir(f)
	root, _ := hostileTree(f, base)
	pristine := snapshot(f, base)
	f.Fuzz(func(t *testing.T, declared, previous string) {
		// Rebuild the tree only when the last input changed it: most inputs
		// are refused and leave it as it was.
		before := snapshot(t, base)
		if !reflect.DeepEqual(before, pristine) {
			if err := os.RemoveAll(base); err != nil {
				t.Fatal(err)
			}
			hostileTree(t, base)
			before = snapshot(t, base)
		}

		var files []File
		for i, p := range strings.Split(declared, "\n") {
			if i == 8 {
				break
			}
			files = append(files, File{Path: p, Data: []byte("fuzz:" + p), Mode: 0o644})
		}
		prev := strings.Split(previous, "\n")
		if len(prev) > 8 {
			prev = prev[:8]
		}
		res, err := (FileApplier{Root: root}).Apply(context.Background(), files, prev)
		after := snapshot(t, base)

		rootRel, _ := filepath.Rel(base, root)
		for p, d := range before {
			inRoot := p == rootRel || strings.HasPrefix(p, rootRel+string(filepath.Separator))
			if !inRoot && after[p] != d {
				t.Fatalf("%s outside the root changed: %q -> %q", p, d, after[p])
			}
			if strings.Contains(d, " -> ") && after[p] != d {
				t.Fatalf("link %s changed: %q -> %q", p, d, after[p])
			}
		}
		for p := range after {
			if _, ok := before[p]; !ok && !strings.HasPrefix(p, rootRel+string(filepath.Separator)) {
				t.Fatalf("%s appeared outside the root", p)
			}
		}
		if err != nil {
			// A refusal or failure is undone: the tree is exactly as before.
			if !reflect.DeepEqual(before, after) {
				t.Fatalf("Apply failed (%v) but changed the tree", err)
			}
			return
		}
		for _, f := range files {
			got, rerr := os.ReadFile(filepath.Join(root, filepath.FromSlash(f.Path)))
			fi, lerr := os.Lstat(filepath.Join(root, filepath.FromSlash(f.Path)))
			if rerr != nil || lerr != nil || !fi.Mode().IsRegular() || string(got) != string(f.Data) {
				t.Fatalf("declared %q not written as a regular file: %v %v", f.Path, rerr, lerr)
			}
		}
		if len(res.Managed) != len(files) {
			t.Fatalf("managed %v for %d files", res.Managed, len(files))
		}
	})
}

// fuzzDir is a directory for the fuzz tree, on tmpfs when /dev/shm is one:
// every successful Apply flushes to disk, and on a real disk the flushes, not
// the code under test, would set the pace. Fuzz workers are killed when the
// run ends, before their cleanups run, so the name carries the process id and
// each start removes the directories of processes that are gone.
func fuzzDir(f *testing.F) string {
	const prefix = "/dev/shm/fuzz-apply-"
	old, _ := filepath.Glob(prefix + "*")
	for _, d := range old {
		pid, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(d, prefix), "-", 2)[0])
		if err == nil && syscall.Kill(pid, 0) == syscall.ESRCH {
			os.RemoveAll(d)
		}
	}
	d, err := os.MkdirTemp("/dev/shm", fmt.Sprintf("fuzz-apply-%d-", os.Getpid()))
	if err != nil {
		return f.TempDir()
	}
	f.Cleanup(func() { os.RemoveAll(d) })
	return d
}
