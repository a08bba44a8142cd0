// Package apply makes the machine match a declaration.
//
// An Applier turns the declared state into the actual one. The file applier is
// the first: it keeps a managed root directory holding exactly the declared
// files. Declarations come from the network, so the applier assumes nothing
// about their paths: every path is checked, no write can leave the root or go
// through a symbolic link, and a declaration is applied whole or not at all.
package apply

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/user"
	"path"
	"slices"
	"strconv"
	"strings"

	"mesh/declarations"
)

// MaxFileSize is the most a managed file may hold: what a declaration may
// declare. The applier reads the file it finds at each declared or previously
// managed path whole, to compare it with the declared one and to restore it if
// the apply fails, so a file larger than any it would write is refused
// (ErrTooLarge) rather than read: a file made huge in the managed root (a sparse
// one costs its maker nothing) must not take the agent's memory with it.
const MaxFileSize = declarations.MaxFileSize

// File is one declared file. Path is slash-separated and relative to the
// managed root. The caller has validated it already; the applier checks again.
type File struct {
	Path string
	Data []byte
	Mode fs.FileMode // permission bits, optionally with fs.ModeSetuid, ModeSetgid, ModeSticky (or Unix 04000, 02000, 01000)
	// Owner and Group are a user and a group, by name or numeric id. Empty keeps
	// the owner (group) of the file found at the path, also when its content
	// changes; a new file is the agent's user's (group's). Only with Chown (see
	// FileApplier).
	Owner string
	Group string
}

// Result says what an Apply did. Written, Removed and Unchanged are sorted.
// Managed is the new set of managed paths, sorted: every declared path.
// Left, sorted by path, holds the paths no longer declared that were not removed
// because something other than a regular file is there now, or on the way to
// them (see FileApplier): they are no longer managed either.
type Result struct {
	Written   []string
	Removed   []string
	Unchanged []string
	Managed   []string
	Left      []LeftPath
}

// LeftPath is a path no longer declared that Apply left in place, and why: a
// directory, a symbolic link or another file that is not a regular one stands
// there, or a link or a file stands where a directory on its way was. The
// applier removes only regular files, and never through a link, so such a path
// is not the file it wrote any more: it is left to whoever made it.
type LeftPath struct {
	Path   string
	Reason string
}

// Applier makes part of the machine match a declaration.
type Applier interface {
	// Apply makes the managed root hold exactly files, removing the paths in
	// previous that are no longer declared.
	Apply(ctx context.Context, files []File, previous []string) (Result, error)
}

// FileApplier keeps the regular files under Root equal to the declared ones.
//
// Paths are opened one name at a time from the root, never following a link
// (through os.Root where the system has no openat), so no path and no symbolic
// link can reach outside Root; beyond that, a symbolic link anywhere on a declared
// or previously managed path (even one pointing inside Root) is refused, so a
// declaration cannot aim writes through links. Root itself may be a link: it
// is the operator's configuration, not the declaration's.
//
// Each file is written atomically (temp file in its directory, fsync, chown,
// chmod, rename, fsync of the directory) and only when its content, mode or
// declared ownership differs. The temp files an apply killed part way left in a
// directory of a declared or previously managed path are removed by the next
// Apply, before its first write or removal there or after its writes
// (run.sweepRest), once per directory while the Guard keeps the root (see
// run.sweep); without a Guard, by every Apply. The file found at a declared or
// previously managed path is opened without following a link at its name, and
// read only if it is a regular file of at most MaxFileSize bytes. Missing parent directories
// of declared files are created with mode 0755, whatever the umask; Root itself, when
// missing, is created 0755 less the umask (0700 under umask 077: the operator's
// setting, and the safer way to be wrong), never the directories above it
// (ErrRootParentMissing), and with Guard only where the Guard allows (ErrRootGone:
// see RootGuard). A file that is no longer declared is removed; directories
// the applier created are left in place when they become empty. A file no
// longer declared may give way to a directory a new file needs, but a
// directory is never replaced by a file, even one the removals left empty:
// such a declaration is refused until someone removes the directory. A path no
// longer declared where something other than a regular file stands now (a
// directory, a symbolic link, a FIFO), or with a link or a file where a
// directory on its way was, is left in place and said so (Result.Left), not
// refused: nothing is removed or read through it, and every later declaration
// failed on it, though none named it.
//
// Owner and Group are applied only when Chown is true, which in practice means
// running as root. Then an empty Owner or Group keeps the owner or group of the
// file found at the path: a file rewritten for a new content or mode is given
// them, as an unchanged one keeps them, and a new file belongs to the agent's
// user. When Chown is false they are ignored: new files belong to the agent's
// user, and replaced files take the agent's ownership too, since replacing is
// writing a new file.
//
// The checks happen on the paths as they are when Apply starts; every step
// after them goes through the directories the applier opened from the root one
// name at a time, never following a link (dirHandle), so a local process racing
// it to swap a directory for a link makes the apply fail and roll back: it
// cannot redirect a write or a removal, inside Root or out of it, nor change
// the mode of anything but what the applier wrote.
type FileApplier struct {
	Root  string
	Chown bool // apply Owner/Group (only meaningful as root)
	// Guard, when set, judges the directory opened as Root at every Apply and
	// Differs (see RootGuard); the agent's checks Root's path that way.
	Guard *RootGuard

	// failpoint, when set by tests, is called before each step ("inspect"
	// before opening the file found at a path, "write", "create" before making
	// its temporary file, "mkdir" after making a
	// directory, "syncdir" after a rename, "remove", "rollback") on a path, and
	// an error from it fails that step.
	failpoint func(step, path string) error
	// maxOpenDirs, when set by tests, replaces the constant of that name.
	maxOpenDirs int
}

// Apply makes Root hold exactly files, removing the paths in previous that are
// no longer declared. It first checks everything: every path, every directory
// on the way, every owner. A problem there is a *PathError and nothing is
// changed. Then it removes the files no longer declared and writes the ones
// that differ, in path order. If a write or removal fails, or ctx is cancelled,
// the changes already made are undone (replaced files get their previous
// content, mode and ownership back, new ones are removed, removed ones are
// restored) and the error is an *ApplyError saying whether that succeeded.
func (a FileApplier) Apply(ctx context.Context, files []File, previous []string) (Result, error) {
	r, decl, stale, err := a.begin(ctx, files, previous, true)
	if err != nil {
		return Result{}, err
	}
	defer r.end()
	plan, err := r.inspect(decl, stale)
	if err != nil {
		return Result{}, err
	}
	res := Result{Managed: sortedKeys(decl), Left: plan.left}
	// Removals first: a file no longer declared may stand where a declared
	// file now needs a directory.
	for _, rm := range plan.removes {
		if err := ctx.Err(); err != nil {
			return Result{}, r.fail(rm.path, err)
		}
		if err := r.remove(rm); err != nil {
			return Result{}, r.fail(rm.path, err)
		}
		res.Removed = append(res.Removed, rm.path)
	}
	for _, w := range plan.writes {
		if w.unchanged {
			res.Unchanged = append(res.Unchanged, w.path)
			continue
		}
		if err := ctx.Err(); err != nil {
			return Result{}, r.fail(w.path, err)
		}
		if err := r.write(w); err != nil {
			return Result{}, r.fail(w.path, err)
		}
		res.Written = append(res.Written, w.path)
	}
	r.sweepRest(decl, stale)
	return res, nil
}

// Differs reports whether Apply of files would change the managed root: a file to
// write (its content, mode or owner), one to remove, a directory to create. It only
// looks (what Apply inspects before its first write), and fails where that would,
// but for an error reading a file it did not need to read: unlike Apply, which keeps
// every file it finds to restore it, Differs reads only a file at a declared path
// of the declared content's size. Others differ whatever they hold, and reading
// them whole held up to MaxFileSize a path at every file check, a file a local user
// made large at each managed path included.
func (a FileApplier) Differs(ctx context.Context, files []File, previous []string) (bool, error) {
	r, decl, stale, err := a.begin(ctx, files, previous, false)
	if err != nil {
		return false, err
	}
	if r == nil {
		return len(files) > 0, nil // no root yet: each file would be written
	}
	defer r.end()
	r.looking = decl
	plan, err := r.inspect(decl, stale)
	if err != nil {
		return false, err
	}
	if len(plan.removes) > 0 {
		return true, nil
	}
	for _, w := range plan.writes {
		if !w.unchanged {
			return true, nil
		}
	}
	return false, nil
}

// begin checks files and previous on their own and opens the root for one Apply:
// the run, the declared files by path, and the previous paths no longer declared.
// A root that does not exist is made when create is set; else begin returns no
// run and no error.
func (a FileApplier) begin(ctx context.Context, files []File, previous []string, create bool) (*run, map[string]*File, []string, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, nil, err
	}
	if a.Root == "" {
		return nil, nil, nil, errors.New("apply: FileApplier has no Root")
	}
	decl, err := checkDeclared(files, !a.Chown)
	if err != nil {
		return nil, nil, nil, err
	}
	var stale []string
	for _, p := range previous {
		if err := checkPath(p); err != nil {
			return nil, nil, nil, err
		}
		if _, declared := decl[p]; !declared && !slices.Contains(stale, p) {
			stale = append(stale, p)
		}
	}
	slices.Sort(stale)

	guard := a.Guard
	if guard == nil {
		guard = &RootGuard{}
	}
	root, err := guard.open(a.Root, create)
	if err != nil || root == nil {
		return nil, nil, nil, err
	}
	r := &run{a: a, root: root, guard: guard, known: func(p string) bool {
		_, declared := decl[p]
		return declared || slices.Contains(stale, p)
	}}
	return r, decl, stale, nil
}

// end closes what the run opened: its directories, then the root.
func (r *run) end() {
	r.closeDirs()
	r.root.Close()
}

// checkDeclared checks the declared files on their own, before looking at the
// disk: paths, modes, duplicates, and a file declared where another declared
// file needs a directory.
//
// The map points into a copy of files, not holding File values itself: for the
// one or two files of a typical declaration, a map of values was a kilobyte
// allocated per apply.
//
// unprivileged (an agent that is not root, so Chown is false) also refuses a mode
// without the owner's read bit: the agent writes such a file, but cannot open it
// again at the next apply, which reads every managed file, so every later
// declaration failed on it until someone changed its mode by hand.
func checkDeclared(files []File, unprivileged bool) (map[string]*File, error) {
	decl := make(map[string]*File, len(files))
	files = slices.Clone(files)
	for i := range files {
		f := &files[i]
		if err := checkPath(f.Path); err != nil {
			return nil, err
		}
		f.Mode = unixMode(f.Mode)
		if f.Mode&^modeBits != 0 {
			return nil, &PathError{Path: f.Path, Err: ErrInvalidMode,
				Reason: fmt.Sprintf("mode %v is not a file permission", f.Mode)}
		}
		if unprivileged && f.Mode&0o400 == 0 {
			return nil, &PathError{Path: f.Path, Err: ErrUnreadableMode,
				Reason: fmt.Sprintf("mode %04o leaves the file unreadable to its owner, the agent's user (uid %d), which reads every managed file at each apply; declare it with the owner's read bit (0400, 0600), or run the agent as root", uint32(f.Mode.Perm()), os.Geteuid())}
		}
		// The next apply would refuse to read such a file back.
		if len(f.Data) > MaxFileSize {
			return nil, &PathError{Path: f.Path, Err: ErrTooLarge,
				Reason: fmt.Sprintf("it is declared with %s, more than the %s a managed file may hold; declare less",
					sizeText(int64(len(f.Data))), sizeText(MaxFileSize))}
		}
		if _, dup := decl[f.Path]; dup {
			return nil, &PathError{Path: f.Path, Err: ErrInvalidPath, Reason: "it is declared twice"}
		}
		decl[f.Path] = f
	}
	for p := range decl {
		for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
			if _, ok := decl[dir]; ok {
				return nil, &PathError{Path: dir, Err: ErrInvalidPath,
					Reason: fmt.Sprintf("it is declared as a file and is also the directory of %q", p)}
			}
		}
	}
	return decl, nil
}

// checkPath accepts a clean, relative, slash-separated path with no ".."
// element: the only form in which a declaration names a file.
func checkPath(p string) error {
	bad := func(kind error, reason string) error { return &PathError{Path: p, Err: kind, Reason: reason} }
	switch {
	case p == "":
		return bad(ErrInvalidPath, "the path is empty")
	case strings.HasPrefix(p, "/"):
		return bad(ErrEscapesRoot, "the path is absolute; declared paths are relative to the managed root")
	case strings.IndexByte(p, 0) >= 0:
		return bad(ErrInvalidPath, "the path contains a NUL byte")
	case slices.Contains(strings.Split(p, "/"), ".."):
		return bad(ErrEscapesRoot, `the path has a ".." element`)
	case p == "." || !fs.ValidPath(p):
		return bad(ErrInvalidPath, `the path is not clean (empty, "." or trailing elements, or a doubled slash)`)
	case len(p) > 4000:
		return bad(ErrInvalidPath, "the path is too long")
	}
	for _, e := range strings.Split(p, "/") {
		if len(e) > 255 {
			return bad(ErrInvalidPath, "a path element is longer than 255 bytes")
		}
	}
	return nil
}

// write is one declared file and what the disk holds at its path now.
type write struct {
	path      string
	file      File
	uid, gid  int  // to set (declared, or with Chown the previous file's when not), -1 to leave the new file's
	unchanged bool // the disk already matches
	prev      *saved
	mkdirs    []string // parent directories to create, outermost first
}

// remove is a file no longer declared.
type remove struct {
	path string
	prev *saved
}

// saved is a file's previous state, kept in memory to roll back to.
type saved struct {
	data     []byte
	mode     fs.FileMode
	uid, gid int  // -1 when unknown
	unread   bool // not read, as Differs need not (run.skipRead): data is nil
}

type plan struct {
	writes  []write
	removes []remove
	left    []LeftPath
}

// run is one Apply's progress, so a failure can be undone.
type run struct {
	a     FileApplier
	root  *rootDir   // the managed root, opened and judged by guard
	guard *RootGuard // the Apply's guard, which remembers the directories swept
	done  []undo
	// dirs are the directories this Apply works in, each opened once: every step
	// on a file then names it by its base name alone, instead of opening each
	// directory on the way again for every step.
	dirs map[string]*dirHandle
	// open counts the handles of dirs holding descriptors: past maxOpenDirs the
	// others are closed (reopened, one name at a time, when needed again).
	open int
	// known says whether a path is declared or managed: a temporary file's name
	// may be declared too, and is then not a leftover.
	known func(p string) bool
	// looking, set by Differs, holds the declared files: a run that only looks,
	// and reads no file it need not (skipRead).
	looking map[string]*File
	// dirent is sweep's buffer (direntBuffer).
	dirent []byte
}

// skipRead says whether the regular file of size bytes found at p need not be
// read: in a run that only looks, a file no longer declared is to be removed, and
// one declared with a content of another size is to be written, whatever they hold.
func (r *run) skipRead(p string, declared bool, size int64) bool {
	if r.looking == nil {
		return false
	}
	f, ok := r.looking[p]
	return !declared || !ok || size != int64(len(f.Data))
}

// dirHandle is one directory of the managed tree, opened as far as this Apply
// needs it and no further, once: from its parent's descriptor, one name at a
// time, never through a link (dirFd in dir_linux.go, dirFile in dir_other.go), so
// that every step on a file in it names the file by its base name alone. An
// Apply that finds every file unchanged opens each directory once and writes
// through none.
//
// By name from the managed root, a step would follow a link that stays inside
// it: a local user who may write one directory of the root, swapping a link to
// another (../etc) in for a directory of a declared path between the inspection
// and the write, had the agent write a file of theirs into etc/, or remove one
// there. And before the first step that changes anything in it (ready), the
// directory's path must still lead to the directory opened: one swapped since
// the inspection makes the apply fail and roll back, rather than write a file
// that is not at its path.
type dirHandle struct {
	swept bool // this Apply has swept it (see run.sweep)
	// meshChecked: meshDirectory looked at it; meshFile is what it found.
	meshChecked bool
	meshFile    string
	name        string     // slash-separated in the managed root, "." for the root itself
	parent      *dirHandle // the directory it is in; nil for the managed root
	run         *run       // the Apply it belongs to, which bounds the handles open
	sysDir                 // what the system keeps of it (dir_linux.go, dir_other.go)
}

// dir returns the handle of dir, a clean slash-separated path in the managed
// root ("." for the root itself) whose components inspect has checked. It
// opens nothing yet.
func (r *run) dir(dir string) *dirHandle {
	if d, ok := r.dirs[dir]; ok {
		return d
	}
	d := &dirHandle{name: dir, run: r}
	if dir != "." {
		d.parent = r.dir(path.Dir(dir))
	}
	if r.dirs == nil {
		r.dirs = map[string]*dirHandle{}
	}
	r.dirs[dir] = d
	return d
}

// maxOpenDirs bounds the directory handles an Apply keeps open (each holds one or
// two descriptors): a declaration of a thousand files each in directories of its
// own, hundreds deep, opened hundreds of thousands and ran out of descriptors
// (EMFILE) part way.
const maxOpenDirs = 256

// makeRoom closes handles, other than d's and those above it, once maxOpenDirs
// are open: half of them, so that a long walk does not close one at every step.
func (r *run) makeRoom(d *dirHandle) {
	limit := maxOpenDirs
	if r.a.maxOpenDirs > 0 {
		limit = r.a.maxOpenDirs
	}
	if r.open < limit {
		return
	}
	keep := map[*dirHandle]bool{}
	for h := d; h != nil; h = h.parent {
		keep[h] = true
	}
	for _, h := range r.dirs {
		if r.open < limit/2 {
			return
		}
		if h.parent == nil || keep[h] || !h.isOpen() {
			continue
		}
		h.close()
	}
}

// in returns the handle of the directory p is in, ready for a step that changes
// it, and p's name there: the steps on p (make, remove) go through it, never
// through a path of several names.
func (r *run) in(p string) (*dirHandle, string, error) {
	d := r.dir(path.Dir(p))
	return d, path.Base(p), d.ready()
}

func (r *run) closeDirs() {
	for _, d := range r.dirs {
		d.close()
	}
}

type undo struct {
	path    string
	prev    *saved // nil: the path did not exist before
	isDir   bool   // a directory this run created
	removed bool   // a file this run removed
}

// inspect checks every path against the disk and reads what is there, before
// anything is written.
func (r *run) inspect(decl map[string]*File, stale []string) (plan, error) {
	var pl plan
	goingAway := map[string]bool{}
	var left *leftInPlace
	for _, p := range stale {
		missing, err := r.checkParents(p, nil, false)
		if errors.As(err, &left) {
			pl.left = append(pl.left, LeftPath{Path: p, Reason: left.reason})
			continue
		}
		if err != nil {
			return plan{}, err
		}
		if len(missing) > 0 {
			continue // already gone
		}
		prev, err := r.readExisting(p, false)
		if errors.As(err, &left) {
			pl.left = append(pl.left, LeftPath{Path: p, Reason: left.reason})
			continue
		}
		if err != nil {
			return plan{}, err
		}
		if prev != nil {
			pl.removes = append(pl.removes, remove{path: p, prev: prev})
			goingAway[p] = true
		}
	}
	for _, p := range sortedKeys(decl) {
		f := *decl[p]
		w := write{path: p, file: f, uid: -1, gid: -1}
		if r.a.Chown {
			var err error
			if w.uid, w.gid, err = lookupOwner(f); err != nil {
				return plan{}, err
			}
		}
		missing, err := r.checkParents(p, goingAway, true)
		if err != nil {
			return plan{}, err
		}
		w.mkdirs = missing
		if len(missing) == 0 {
			prev, err := r.readExisting(p, true)
			if err != nil {
				return plan{}, err
			}
			w.prev = prev
			if r.a.Chown && prev != nil {
				// Not declared, the owner is kept: a rewrite is a new file, the
				// agent's, and a file of the app's became root's at its next change
				// of content (still 0640: the app could no longer read it), while an
				// unchanged one stayed the app's.
				if f.Owner == "" {
					w.uid = prev.uid
				}
				if f.Group == "" {
					w.gid = prev.gid
				}
			}
			w.unchanged = prev != nil && !prev.unread && bytes.Equal(prev.data, f.Data) && prev.mode == f.Mode &&
				(w.uid < 0 || w.uid == prev.uid) && (w.gid < 0 || w.gid == prev.gid)
		}
		pl.writes = append(pl.writes, w)
	}
	return pl, nil
}

// checkParents walks the directories above p from the root down. It refuses a
// symbolic link or a non-directory on the way, unless that is a file in
// goingAway (to be removed first), and returns the directories that will have
// to be created, outermost first. For p no longer declared, such a thing on the
// way is a *leftInPlace instead of a refusal.
func (r *run) checkParents(p string, goingAway map[string]bool, declared bool) ([]string, error) {
	if file := r.meshDirectory(r.dir(".")); file != "" {
		return nil, meshDirectoryRefusal(p, ".", file, declared)
	}
	elems := strings.Split(p, "/")
	for i := 1; i < len(elems); i++ {
		dir := strings.Join(elems[:i], "/")
		mode, err := r.onTheWay(dir, goingAway[dir])
		switch {
		case errors.Is(err, fs.ErrNotExist) || err == nil && goingAway[dir]:
			var missing []string
			for j := i; j < len(elems); j++ {
				missing = append(missing, strings.Join(elems[:j], "/"))
			}
			return missing, nil
		case err != nil:
			return nil, fmt.Errorf("apply: inspecting %q: %w", dir, err)
		case !declared && !mode.IsDir():
			return nil, leftOnTheWay(dir, mode)
		case mode&fs.ModeSymlink != 0:
			return nil, &PathError{Path: p, Err: ErrEscapesRoot,
				Reason: fmt.Sprintf("%q on its way is a symbolic link, and declared files are never written through links"+linkRemedy, dir)}
		case !mode.IsDir():
			return nil, &PathError{Path: p, Err: ErrInvalidPath,
				Reason: fmt.Sprintf("%q on its way is a %s, not a directory", dir, kind(mode))}
		}
		if file := r.meshDirectory(r.dir(dir)); file != "" {
			return nil, meshDirectoryRefusal(p, dir, file, declared)
		}
	}
	return nil, nil
}

const modeBits = fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky

// unixMode turns the Unix special bits (04000 setuid, 02000 setgid, 01000
// sticky), which a mode converted from a declaration's octal number carries,
// into fs.FileMode's. No fs.FileMode flag uses those bits, so this is never
// ambiguous.
func unixMode(m fs.FileMode) fs.FileMode {
	for _, b := range []struct{ unix, goBit fs.FileMode }{
		{0o4000, fs.ModeSetuid}, {0o2000, fs.ModeSetgid}, {0o1000, fs.ModeSticky},
	} {
		if m&b.unix != 0 {
			m = m&^b.unix | b.goBit
		}
	}
	return m
}

func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m.IsRegular():
		return "file"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "special file"
}

func (r *run) hook(step, p string) error {
	if r.a.failpoint == nil {
		return nil
	}
	return r.a.failpoint(step, p)
}

// write creates the missing parents of w and writes its file atomically.
func (r *run) write(w write) error {
	if err := r.hook("write", w.path); err != nil {
		return err
	}
	for _, dir := range w.mkdirs {
		parent, name, err := r.in(dir)
		if err != nil {
			return err
		}
		if err := parent.mkdir(name); err != nil {
			if errors.Is(err, fs.ErrExist) {
				continue // an earlier file in this run made it
			}
			return err
		}
		r.done = append(r.done, undo{path: dir, isDir: true})
		if err := r.hook("mkdir", dir); err != nil {
			return err
		}
		if err := r.settleDir(parent, dir, name); err != nil {
			return err
		}
		if err := r.syncDir(path.Dir(dir)); err != nil {
			return err
		}
	}
	// Recorded once the new file took the name, failure or not: a failure after
	// the rename (flushing the directory) must still be undone. A write that
	// failed before it is not undone: rewriting the previous content fails the
	// same way on a read-only or full file system, and the rollback then said the
	// managed files might be a mixture when nothing had changed.
	replaced, err := r.writeAtomic(w.path, w.file.Data, w.file.Mode, w.uid, w.gid)
	if replaced {
		r.done = append(r.done, undo{path: w.path, prev: w.prev})
	}
	return err
}

// writeAtomic writes data to p inside the root: temp file in the same
// directory, write, fsync, chown, chmod, rename over p, fsync the directory.
// On failure the temp file is removed, and p is untouched unless replaced
// says the rename was done.
//
// Both flushes stay whatever they cost: without the file's before the rename, a
// crash can leave p renamed to a file whose data never reached the disk (empty or
// torn); without the directory's after it, a crash can forget the rename, so that
// p holds the old content while the agent recorded the new declaration as applied.
func (r *run) writeAtomic(p string, data []byte, mode fs.FileMode, uid, gid int) (replaced bool, err error) {
	d, name, err := r.in(p)
	if err != nil {
		return false, err
	}
	r.sweep(d)
	if err := r.hook("create", p); err != nil {
		return false, err
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	// A short fixed-length name: a 255-byte declared name must not make its
	// temp name too long.
	tmp := tempPrefix + hex.EncodeToString(rnd[:])
	f, err := d.createTemp(tmp)
	if err != nil {
		return false, err
	}
	defer func() {
		if err != nil {
			f.close()
			if rerr := d.removeFile(tmp); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
				// A leftover after all, which this process must sweep again.
				r.guard.setSwept(d.name, false)
			}
		}
	}()
	if err := f.write(data); err != nil {
		return false, err
	}
	if err := f.sync(); err != nil {
		return false, err
	}
	if uid >= 0 || gid >= 0 {
		// Only what differs from the new file's owner, so that restoring a
		// file the agent owned works without privilege.
		if cu, cg, ok := f.owner(); ok {
			if cu == uid {
				uid = -1
			}
			if cg == gid {
				gid = -1
			}
		}
	}
	if uid >= 0 || gid >= 0 {
		if err := f.chown(uid, gid); err != nil {
			return false, err
		}
	}
	// After chown, which clears setuid and setgid.
	if err := f.chmod(mode); err != nil {
		return false, err
	}
	if err := f.close(); err != nil {
		return false, err
	}
	if err := d.rename(tmp, name); err != nil {
		return false, err
	}
	if err := r.hook("syncdir", p); err != nil {
		return true, err
	}
	return true, d.sync()
}

// tempPrefix and tempLen make writeAtomic's temporary names: the prefix and 16
// hex digits.
const (
	tempPrefix = ".meshhost-"
	tempLen    = len(tempPrefix) + 16
)

// sweep removes the temporary files an apply killed part way (a SIGKILL, a crash,
// a power cut) left in d, where it is about to write or remove: nothing else would
// ever remove them, each as large as a file it wrote, and readable by the agent's
// user only. A regular file with such a name that is declared or managed is kept.
// Failures are ignored: the step that follows says what is wrong with the
// directory, if anything.
//
// Once per directory for as long as the guard keeps the root (the agent's: the
// process's life), not at every Apply: such a leftover is only made by an apply
// cut off with its process (killed, crashed, the machine down), and the process
// that starts next sweeps each directory before its first write or removal there.
// A temporary file this process failed to remove makes its directory swept again
// (writeAtomic), and another root accepted sweeps everything again. Swept at every
// Apply, a directory cost three reads of its names a declaration, a tenth of the
// agent's system calls for one.
func (r *run) sweep(d *dirHandle) {
	if d.swept || r.guard.sweptAlready(d.name) {
		return
	}
	d.swept = true
	complete := d.eachName(r.direntBuffer(), func(name string) bool {
		if len(name) != tempLen || !strings.HasPrefix(name, tempPrefix) || !isLowerHex(name[len(tempPrefix):]) {
			return true
		}
		if r.known != nil && r.known(path.Join(d.name, name)) {
			return true
		}
		fi, err := d.lstat(name)
		if err != nil {
			return errors.Is(err, fs.ErrNotExist)
		}
		if !fi.Mode().IsRegular() {
			return true
		}
		err = d.removeFile(name)
		return err == nil || errors.Is(err, fs.ErrNotExist)
	})
	if complete {
		r.guard.setSwept(d.name, true)
	}
}

// sweepRest sweeps the directories of the declared and previously managed paths
// that no write or removal of this Apply swept, those that still lead where they
// did (ready): a temporary file left there by an apply killed part way stayed for
// good when the next declaration only dropped its path, which the killed apply
// had not yet written (nothing to remove), or declared it again with the content
// already there (nothing to write). With the agent's Guard, each directory once
// in the process's life, as for the others: the first Apply after a start, not
// every Apply. A directory that is not ready is left to the Apply that next
// writes or removes in it, which says what is wrong with it.
func (r *run) sweepRest(decl map[string]*File, stale []string) {
	each := func(p string) {
		d := r.dir(path.Dir(p))
		if d.swept || r.guard.sweptAlready(d.name) || d.ready() != nil {
			return
		}
		r.sweep(d)
	}
	for p := range decl {
		each(p)
	}
	for _, p := range stale {
		each(p)
	}
}

// sweepBatch is how many names sweep reads from a directory at a time.
const sweepBatch = 256

// direntBuffer is the buffer sweep reads a directory's names into, sweepBatch of
// them at a time, made at the run's first sweep. On the heap, not in sweep's frame:
// 8 KiB there grew the stack of the goroutine that runs the agent at its first
// declaration, a fresh stack copied whole for each of a fleet's agents: the sweep
// cost 54 µs an agent at 10,000 hosts, 3 µs with the buffer here.
func (r *run) direntBuffer() []byte {
	if r.dirent == nil {
		r.dirent = make([]byte, sweepBatch*32)
	}
	return r.dirent
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func (r *run) syncDir(dir string) error { return r.dir(dir).sync() }

func (r *run) remove(rm remove) error {
	if err := r.hook("remove", rm.path); err != nil {
		return err
	}
	d, name, err := r.in(rm.path)
	if err != nil {
		return err
	}
	// Swept too: a temporary file an apply killed part way left in a directory
	// that the applies after it only removed from stayed for good.
	r.sweep(d)
	if err := d.removeFile(name); err != nil {
		return err
	}
	r.done = append(r.done, undo{path: rm.path, prev: rm.prev, removed: true})
	return d.sync()
}

// maxRollbackErrors is how many of a rollback's failures ApplyError names; the
// rest are counted.
const maxRollbackErrors = 10

// removeIn removes the file p, or the directory p when dir is set, through the
// directory it is in (r.in).
func (r *run) removeIn(p string, dir bool) error {
	parent, name, err := r.in(p)
	if err != nil {
		return err
	}
	if dir {
		return parent.removeDir(name)
	}
	return parent.removeFile(name)
}

// fail undoes this run's changes, newest first, and reports the failure.
func (r *run) fail(p string, cause error) error {
	var errs []error
	for i := len(r.done) - 1; i >= 0; i-- {
		u := r.done[i]
		if err := r.hook("rollback", u.path); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", u.path, err))
			continue
		}
		var err error
		switch {
		case u.isDir:
			// Only if still empty: something else may have put a file there.
			if rerr := r.removeIn(u.path, true); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) && !isNotEmpty(rerr) {
				err = rerr
			}
		case u.prev == nil:
			if rerr := r.removeIn(u.path, false); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
				err = rerr
			}
		default:
			_, err = r.writeAtomic(u.path, u.prev.data, u.prev.mode, u.prev.uid, u.prev.gid)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("restoring %s: %w", u.path, err))
		}
	}
	r.done = nil
	if len(errs) > maxRollbackErrors {
		// One line a path: a failure that undoes thousands of directories (out of
		// descriptors, say) made a text of 21 MB, logged whole and too large for
		// the applied state to be saved.
		errs = append(errs[:maxRollbackErrors], fmt.Errorf("and %d more paths not restored", len(errs)-maxRollbackErrors))
	}
	rbErr := errors.Join(errs...)
	return &ApplyError{Path: p, Err: cause, RolledBack: rbErr == nil, RollbackErr: rbErr}
}

// lookupOwner resolves a file's declared owner and group to ids; a numeric
// value is taken as an id, as chown(1) does.
func lookupOwner(f File) (uid, gid int, err error) {
	uid, gid = -1, -1
	if f.Owner != "" {
		if uid, err = resolveID(f.Owner, func(name string) (string, error) {
			u, err := user.Lookup(name)
			if err != nil {
				return "", err
			}
			return u.Uid, nil
		}); err != nil {
			return -1, -1, &PathError{Path: f.Path, Err: ErrUnknownOwner,
				Reason: fmt.Sprintf("owner %q is not a user on this machine", f.Owner)}
		}
	}
	if f.Group != "" {
		if gid, err = resolveID(f.Group, func(name string) (string, error) {
			g, err := user.LookupGroup(name)
			if err != nil {
				return "", err
			}
			return g.Gid, nil
		}); err != nil {
			return -1, -1, &PathError{Path: f.Path, Err: ErrUnknownOwner,
				Reason: fmt.Sprintf("group %q is not a group on this machine", f.Group)}
		}
	}
	return uid, gid, nil
}

func resolveID(s string, lookup func(string) (string, error)) (int, error) {
	// Ids are 32 bits, and 4294967295 is chown's "leave it" (-1): the declaration
	// format takes up to 4294967294, and so does the applier (it took 31 bits,
	// and called 3000000000 "not a user on this machine").
	if n, err := strconv.ParseUint(s, 10, 32); err == nil && n < math.MaxUint32 {
		return int(n), nil
	}
	id, err := lookup(s)
	if err != nil {
		return -1, err
	}
	n, err := strconv.ParseUint(id, 10, 32)
	if err != nil || n == math.MaxUint32 {
		return -1, fmt.Errorf("the id %q of %s is not one chown takes", id, s)
	}
	return int(n), nil
}

func sortedKeys(m map[string]*File) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
