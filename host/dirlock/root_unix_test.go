//go:build unix

package dirlock

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestARootIsOneAgents: a managed root held by one agent is refused to another, by
// its own name, through a symbolic link to it, and for a root inside it; another
// root, and the same once given up, are taken.
func TestARootIsOneAgents(t *testing.T) {
	base := t.TempDir()
	root, other := filepath.Join(base, "root"), filepath.Join(base, "other")
	for _, d := range []string{filepath.Join(root, "etc", "sub"), other} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(root, link); err != nil {
		t.Fatal(err)
	}
	held, err := AcquireRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ root, outer string }{{root, ""}, {link, ""}, {filepath.Join(root, "etc", "sub"), root}} {
		_, err := AcquireRoot(c.root)
		var ie *RootInUseError
		if !errors.As(err, &ie) || !errors.Is(err, ErrInUse) || ie.Outer != c.outer && !(c.outer != "" && filepath.Clean(ie.Outer) == c.outer) {
			t.Errorf("a second agent on %s: %v, want refused (outer %q)", c.root, err, c.outer)
		}
	}
	var ie *RootInUseError
	if err := RefuseInsideClaimed(filepath.Join(root, "etc", "not-made")); !errors.As(err, &ie) || filepath.Clean(ie.Outer) != root {
		t.Errorf("a root not made yet inside a held root: %v, want refused (outer %s)", err, root)
	}
	if err := RefuseInsideClaimed(filepath.Join(other, "not-made")); err != nil {
		t.Errorf("a root not made yet apart: %v", err)
	}
	l, err := AcquireRoot(other)
	if err != nil {
		t.Fatalf("a root apart: %v", err)
	}
	l.Release()
	held.Release()
	if l, err = AcquireRoot(filepath.Join(root, "etc")); err != nil {
		t.Fatalf("inside a root given up: %v", err)
	}
	l.Release()
}

// TestTheOtherProgramsDirectoryIsSaidAsSuch: a directory locked by meshctl serve,
// asked for by meshhost (a control node's data directory given as a state
// directory), said "stop that process or wait for it to finish", which puts the
// two programs' files in one directory for good; it says whose it is.
func TestTheOtherProgramsDirectoryIsSaidAsSuch(t *testing.T) {
	dir := t.TempDir()
	held, err := Acquire("data directory", dir, "meshctl serve")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	_, err = Acquire("state directory", dir, "meshhost run")
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "it is meshctl's directory, not meshhost's") || strings.Contains(err.Error(), "wait for it") {
		t.Fatalf("meshhost on meshctl's directory: %v", err)
	}
	_, err = Acquire("data directory", dir, "meshctl check")
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "wait for it to finish") {
		t.Fatalf("meshctl on meshctl's directory: %v", err)
	}
}
