//go:build unix

package dirlock

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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

// TestALockOfAnotherUserDoesNotStopTheAgent: any user who may read a directory may
// lock it, and a lock on the managed root or on / kept the agent from starting (a
// review: `runuser -u nobody -- flock -s /srv/mesh`). A lock whose holder is no
// agent leaves the root unheld, said, and the agent runs.
func TestALockOfAnotherUserDoesNotStopTheAgent(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to lock as another user")
	}
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("no flock(1) to hold a lock as another user")
	}
	root := t.TempDir()
	for _, d := range []string{filepath.Dir(root), root} { // nobody passes through
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ what, dir, mode string }{{"the root, shared", root, "-s"}, {"the root, exclusive", root, "-x"}, {"/", "/", "-x"}} {
		hold := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "flock", c.mode, c.dir, "sleep", "30")
		if err := hold.Start(); err != nil {
			t.Skipf("cannot run flock as nobody: %v", err)
		}
		waitHeld(t, c.dir)
		l, err := AcquireRoot(root)
		hold.Process.Kill()
		hold.Wait()
		if err != nil {
			t.Errorf("%s locked by nobody: %v, want the agent to run", c.what, err)
			continue
		}
		if c.dir == root && l.Unheld == "" {
			t.Errorf("%s locked by nobody: held, want it said unheld", c.what)
		}
		l.Release()
	}
}

// waitHeld waits until something holds an exclusive or shared lock on dir.
func waitHeld(t *testing.T, dir string) {
	t.Helper()
	for range 100 {
		d, err := os.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		err = syscall.Flock(int(d.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		d.Close()
		if err != nil {
			return // another holds it
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("nothing came to hold %s", dir)
}
