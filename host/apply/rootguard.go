package apply

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// ErrRootMoved means the managed root's path led to another directory while it was
// opened: something swapped it (a directory above it, or the root itself, for a
// link) between the open and the check. Nothing was written.
var ErrRootMoved = errors.New("the managed root's path led elsewhere while it was opened")

// ErrRootGone means the managed root the agent worked in is no longer what its path
// leads to: it is missing and so is the directory above it, or that directory is
// another one (a file system unmounted, a directory above removed or moved), or
// another directory stands in its place (the mount point an unmount uncovers, a link
// swapped in). Nothing was written and no directory made. See *RootGoneError.
var ErrRootGone = errors.New("the managed root is not the directory the agent worked in")

// ErrRootParentMissing means the managed root does not exist, nor does the
// directory above it, which the applier never makes. Nothing was written.
var ErrRootParentMissing = errors.New("the managed root's parent does not exist")

// RootGoneError is a managed root refused because it is not the directory accepted
// before (RootGuard). Exactly one of these says how: Missing, the topmost directory
// on Root's path that is not there any more (Root missing too); Moved, a directory
// on Root's path (Root or its parent) that is another one now, Was and Now naming
// the two (device and inode, where known); Link, Root missing where a symbolic
// link was. Target is where Root points now, when it became a symbolic link.
type RootGoneError struct {
	Root     string
	Missing  string
	Moved    string
	Was, Now string
	Link     bool
	Target   string
}

func (e *RootGoneError) Error() string {
	return "apply: " + e.what() + "; nothing was written and no directory made (the declared files would land under a mount point, " +
		"or in another tree). Mount it back or put it back where it was, and the next check or apply writes the declared files there; " +
		"if the new directory is meant, restart the agent (systemctl restart meshhost), which takes the managed root as it finds it then " +
		"(and makes it if only the root itself is missing)"
}

// what says what happened to the root.
func (e *RootGoneError) what() string {
	ids := ""
	if e.Was != "" || e.Now != "" {
		ids = fmt.Sprintf(" (%s; it was %s)", orUnknown(e.Now), orUnknown(e.Was))
	}
	switch {
	case e.Missing != "":
		return fmt.Sprintf("the managed root %s is gone, and %s above it is not there either (a file system unmounted, a directory removed or moved)", e.Root, e.Missing)
	case e.Link:
		return fmt.Sprintf("the managed root %s, a symbolic link, is gone", e.Root)
	case e.Moved != e.Root:
		return fmt.Sprintf("the managed root %s is gone, and %s above it is another directory than the one it was in%s: a file system unmounted there, or the directory moved and another put in its place", e.Root, e.Moved, ids)
	case e.Target != "":
		return fmt.Sprintf("the managed root %s is now a symbolic link to %s, another directory than the one the agent worked in%s", e.Root, e.Target, ids)
	}
	return fmt.Sprintf("the managed root %s is another directory than the one the agent worked in%s: a file system unmounted from it, or the directory moved and another put in its place", e.Root, ids)
}

func orUnknown(id string) string {
	if id == "" {
		return "identity unknown"
	}
	return id
}

// Is reports whether target is ErrRootGone.
func (e *RootGoneError) Is(target error) bool { return target == ErrRootGone }

// RootGuard judges the directory an Apply opens as the managed root. The root is
// opened by its path at every Apply, and a path is only as safe as the directories
// on its way: one that did not exist when the agent started (the root is made at
// the first declaration), made since by another user under /tmp, could hold a link
// that aims the agent's writes, as root, into any directory. So the directory opened
// is judged against its path (Check), and the path must still lead to it after the
// check: a path swapped back and forth around the check is caught either way. Once
// judged, the directory is remembered (its device and inode): the next Apply that
// opens the same directory is not judged again, one fstat instead of a walk of the
// path.
//
// Once a root is accepted (by Accept as the agent starts, or by the first Apply),
// another directory at its path is refused (ErrRootGone), not written into: a file
// system unmounted from the root uncovers its mount point, an empty directory of the
// file system below, and the declared files, secrets included, would land there,
// hidden once it is mounted again, their hooks run against the wrong tree; a link
// swapped in would have the declared files written, and files no longer declared
// removed, in someone else's directory. A missing root is made again only in the
// very directory it was in (someone removed the root itself), never with the
// directories above it: those missing, or another directory in their place, is a
// file system unmounted or a tree removed, which is not the agent's to rebuild. The
// same directory back at the path (mounted again, moved back) is the root again.
type RootGuard struct {
	// Check judges the managed root's path once the root exists (for the agent,
	// statedir.CheckRoot): it errs when another user could change a directory
	// on the way or owns the root.
	Check func(path string) error

	mu     sync.Mutex
	judged fs.FileInfo // the directory last judged, by its identity; nil before one
	parent fs.FileInfo // the directory above it when it was judged
	link   bool        // the root's path was a symbolic link when it was judged
	// swept holds the directories of the judged root (slash-separated, "." for
	// the root itself) from which an Apply removed the leftovers of an interrupted
	// one (run.sweep): none appears there again while this process runs, but for a
	// temporary file it failed to remove, which unmarks its directory.
	swept map[string]bool
	// clean holds the directories of the judged root found to be none of the mesh's
	// programs' (meshDirectory): one of theirs is made only in a directory that is
	// empty, which one the agent wrote in is not while it manages files there.
	clean map[string]bool
}

// knownClean reports whether dir was found to be none of the mesh's programs'
// directories since the root was accepted.
func (g *RootGuard) knownClean(dir string) bool {
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.clean[dir]
}

// setClean records that dir is none of the mesh's programs' directories.
func (g *RootGuard) setClean(dir string) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.clean == nil || len(g.clean) >= maxSwept {
		g.clean = map[string]bool{}
	}
	g.clean[dir] = true
}

// sweptAlready reports whether the directory dir of the root was swept since the
// root was accepted.
func (g *RootGuard) sweptAlready(dir string) bool {
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.swept[dir]
}

// setSwept records whether dir is free of leftovers (run.sweep).
func (g *RootGuard) setSwept(dir string, swept bool) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !swept {
		delete(g.swept, dir)
		return
	}
	if g.swept == nil {
		g.swept = map[string]bool{}
	}
	if len(g.swept) >= maxSwept {
		// Declarations that name new directories over months (a release's
		// directory each) grew it for the agent's life: forgotten, each is swept
		// once more.
		clear(g.swept)
	}
	g.swept[dir] = true
}

// maxSwept bounds the directories a RootGuard remembers as swept.
const maxSwept = 4096

// Accept judges the managed root at path as it is now, if it exists, and takes it as
// the root from now on (see RootGuard): the agent calls it as it starts, so that a
// root unmounted before the first apply is told from the one the agent started
// with. A root that does not exist yet is accepted when an Apply makes it.
func (g *RootGuard) Accept(path string) error {
	if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
		return nil // nothing to accept yet, or not a directory: statedir.PrepareRoot says which
	}
	root, opened, err := openRoot(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("apply: opening the managed root: %w", err)
	}
	defer root.Close()
	return g.judge(opened, path, false)
}

// open opens the managed root at path for one Apply, judged (see RootGuard). A
// root that does not exist is made when create is set (its parent must exist, and
// be the directory it was in), its path judged first; otherwise open returns nil
// and no error.
func (g *RootGuard) open(path string, create bool) (*rootDir, error) {
	root, opened, err := openRoot(path)
	made := false
	if errors.Is(err, fs.ErrNotExist) {
		if err := g.gone(path); err != nil {
			return nil, err
		}
		if !create {
			return nil, nil
		}
		if err := g.make(path); err != nil {
			return nil, err
		}
		root, opened, err = openRoot(path)
		made = true
	}
	if err != nil {
		return nil, fmt.Errorf("apply: opening the managed root: %w", err)
	}
	if err := g.judge(opened, path, made); err != nil {
		root.Close()
		return nil, err
	}
	return root, nil
}

// make makes the missing managed root at path, and only it: the directories above
// it are not the applier's to make (a mistyped path, a file system not mounted).
func (g *RootGuard) make(path string) error {
	// Nothing is made where another user could change the way.
	if err := g.check(path); err != nil {
		return err
	}
	err := os.Mkdir(path, 0o755)
	switch {
	case err == nil, errors.Is(err, fs.ErrExist):
		return nil // made, or by something else meanwhile: judged either way
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: the managed root %s is missing, and so is %s above it; the agent makes the managed root, never the directories above it, "+
			"so that a mistyped path does not become a new tree of declared files: make %s, or fix --root; nothing was written",
			ErrRootParentMissing, path, filepath.Dir(filepath.Clean(path)), filepath.Dir(filepath.Clean(path)))
	}
	return fmt.Errorf("apply: creating the managed root: %w", err)
}

// gone refuses a missing root at path in place of the one accepted before, unless
// making it again is what the start would do: the root itself removed, from the
// directory it was in, and not a link. Before a root is accepted it refuses nothing.
func (g *RootGuard) gone(path string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.judged == nil {
		return nil
	}
	if g.link {
		return &RootGoneError{Root: path, Link: true}
	}
	parent := filepath.Dir(filepath.Clean(path))
	now, err := os.Stat(parent)
	switch {
	case err != nil:
		return &RootGoneError{Root: path, Missing: topMissing(parent)}
	case g.parent != nil && !sameFile(now, g.parent):
		return &RootGoneError{Root: path, Moved: parent, Was: dirID(g.parent), Now: dirID(now)}
	}
	return nil
}

// topMissing is the topmost directory above dir, dir included, that cannot be
// reached: the one a person has to mount or put back.
func topMissing(dir string) string {
	for {
		up := filepath.Dir(dir)
		if up == dir {
			return dir
		}
		if _, err := os.Stat(up); err == nil {
			return dir
		}
		dir = up
	}
}

// judge accepts the directory opened (its fstat) as the managed root at path: the one
// judged before; or, when none was or the guard has just made it (made), one
// whose path passes Check and still leads to it after. Another directory than the
// one judged before is refused (ErrRootGone).
func (g *RootGuard) judge(opened fs.FileInfo, path string, made bool) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if made {
		// Another root, whose directories were swept in none (the file system may
		// give it the inode of the one removed). Accepted otherwise, the root is
		// the first, or refused.
		g.swept, g.clean = nil, nil
	}
	if g.judged != nil && sameFile(g.judged, opened) {
		return nil
	}
	if err := g.check(path); err != nil {
		return err
	}
	now, err := os.Stat(path)
	if err != nil || !sameFile(now, opened) {
		return fmt.Errorf("%w: %s; nothing was written, and the next apply tries again", ErrRootMoved, path)
	}
	if g.judged != nil && !made {
		e := &RootGoneError{Root: path, Moved: path, Was: dirID(g.judged), Now: dirID(opened)}
		if lfi, err := os.Lstat(path); err == nil && lfi.Mode()&fs.ModeSymlink != 0 {
			e.Target, _ = os.Readlink(path)
		}
		return e
	}
	g.accept(path, opened)
	return nil
}

// accept takes opened, at path, as the managed root. Called with g.mu held.
func (g *RootGuard) accept(path string, opened fs.FileInfo) {
	g.judged = opened
	g.parent, _ = os.Stat(filepath.Dir(filepath.Clean(path)))
	lfi, err := os.Lstat(path)
	g.link = err == nil && lfi.Mode()&fs.ModeSymlink != 0
}

func (g *RootGuard) check(path string) error {
	if g.Check == nil {
		return nil
	}
	return g.Check(path)
}
