package apply

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
)

// ErrRootMoved means the managed root's path led to another directory while it was
// opened: something swapped it (a directory above it, or the root itself, for a
// link) between the open and the check. Nothing was written.
var ErrRootMoved = errors.New("the managed root's path led elsewhere while it was opened")

// RootGuard judges the directory an Apply opens as the managed root. The root is
// opened by its path at every Apply, and a path is only as safe as the directories
// on its way: one that did not exist when the agent started (the root is made at
// the first declaration), made since by another user under /tmp, could hold a link
// that aims the agent's writes, as root, into any directory. So the directory opened
// is judged against its path (Check), and the path must still lead to it after the
// check: a path swapped back and forth around the check is caught either way. Once
// judged, the directory is remembered (os.SameFile): the next Apply that opens the
// same directory is not judged again, one fstat instead of a walk of the path.
type RootGuard struct {
	// Check judges the managed root's path once the root exists (for the agent,
	// statedir.CheckRoot): it errs when another user could change a directory
	// on the way or owns the root.
	Check func(path string) error

	mu     sync.Mutex
	judged fs.FileInfo // the directory last judged, by its identity
}

// open opens the managed root at path for one Apply, judged (see RootGuard). A
// root that does not exist is made when create is set, its path judged first;
// otherwise open returns nil and no error.
func (g *RootGuard) open(path string, create bool) (*os.Root, error) {
	root, err := os.OpenRoot(path)
	if errors.Is(err, fs.ErrNotExist) {
		if !create {
			return nil, nil
		}
		// Nothing is made where another user could change the way.
		if err := g.check(path); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(path, 0o755); err != nil {
			return nil, fmt.Errorf("apply: creating the managed root: %w", err)
		}
		root, err = os.OpenRoot(path)
	}
	if err != nil {
		return nil, fmt.Errorf("apply: opening the managed root: %w", err)
	}
	if err := g.judge(root, path); err != nil {
		root.Close()
		return nil, err
	}
	return root, nil
}

// judge accepts the directory root holds as the managed root at path: the one
// judged before, or one whose path passes Check and still leads to it after.
func (g *RootGuard) judge(root *os.Root, path string) error {
	opened, err := root.Stat(".")
	if err != nil {
		return fmt.Errorf("apply: the managed root: %w", err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.judged != nil && os.SameFile(g.judged, opened) {
		return nil
	}
	if err := g.check(path); err != nil {
		return err
	}
	now, err := os.Stat(path)
	if err != nil || !os.SameFile(now, opened) {
		return fmt.Errorf("%w: %s; nothing was written, and the next apply tries again", ErrRootMoved, path)
	}
	g.judged = opened
	return nil
}

func (g *RootGuard) check(path string) error {
	if g.Check == nil {
		return nil
	}
	return g.Check(path)
}
