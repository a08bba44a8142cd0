package dirlock

import (
	"fmt"
	"os"
	"path/filepath"
)

// RootInUseError says that a managed root is another agent's: the same directory,
// or one inside the root of another (Outer). It matches ErrInUse.
type RootInUseError struct {
	Root string
	// Outer is the other agent's root that holds Root; "" when it is Root itself.
	Outer string
}

func (e *RootInUseError) Error() string {
	if e.Outer != "" {
		return fmt.Sprintf("managed root %s is inside %s, the managed root of a running agent (`fuser -v %s` names it): two agents on one tree put back each other's files for good, "+
			"each running its hooks every time; give each agent a root of its own, apart from the other's", e.Root, e.Outer, e.Outer)
	}
	return fmt.Sprintf("managed root %s is in use by another running agent (`fuser -v %s` names it): two agents on one root put back each other's files for good, "+
		"each running its hooks every time; give each agent a root of its own", e.Root, e.Root)
}

// Is matches ErrInUse.
func (e *RootInUseError) Is(target error) bool { return target == ErrInUse }

// RootLock is an agent's hold on its managed root.
type RootLock struct{ f *os.File }

// Release gives the root up (exiting does too).
func (l *RootLock) Release() error { return l.f.Close() }

// AcquireRoot takes root, an agent's managed root, for this process: an exclusive
// flock(2) on the directory itself, so that nothing is written into the root, and
// the kernel gives it up however the agent exits. It refuses, with a
// *RootInUseError, a root another agent holds, or one inside the root another agent
// holds (each directory above root is tried shared for the time of one call). A root
// that holds another agent's root is refused by that agent when it starts next.
//
// Two agents on one root (of two meshes, or two nodes of one) each put back the
// other's files at every check, forever, running their hooks each time, while both
// meshes showed the node converged (a review).
func AcquireRoot(root string) (*RootLock, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	f, err := os.Open(abs)
	if err != nil {
		return nil, fmt.Errorf("open the managed root to hold it: %w", err)
	}
	held, err := tryLock(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("hold the managed root %s: %w", root, err)
	}
	if !held {
		f.Close()
		return nil, &RootInUseError{Root: root}
	}
	for dir := filepath.Dir(abs); ; dir = filepath.Dir(dir) {
		if held, _ := heldByAnother(dir); held {
			f.Close()
			return nil, &RootInUseError{Root: root, Outer: dir}
		}
		if dir == filepath.Dir(dir) {
			break
		}
	}
	return &RootLock{f: f}, nil
}

// heldByAnother reports whether another open file holds dir's exclusive flock.
// Anything that keeps it from being tried (a directory this user cannot open) says
// no: only an agent's root is held so.
func heldByAnother(dir string) (bool, error) {
	d, err := os.Open(dir)
	if err != nil {
		return false, err
	}
	defer d.Close()
	free, err := trySharedLock(d)
	return !free && err == nil, err
}
