// Package statedir keeps the host agent's state directory one it can trust, as
// OpenSSH's StrictModes does for ~/.ssh. The directory holds the node's private key,
// the CA it pins and the keys it believes (identity.json), and what it applied
// (applied.state): whoever can change those files can make a root agent trust their
// own mesh. So the agent refuses to enrol or run in a directory that another user
// owns or that group or others may write, and reads the files in it only as regular
// files that belong to its own user, opened without following a symbolic link.
// The other paths the agent acts on as root are judged the same way (paths.go): the
// directories above the state directory and the managed root, and the hooks file.
package statedir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"

	"mesh/host/atomicfile"
	"mesh/host/dirlock"
	"mesh/host/readfile"
)

// Errors callers branch on with errors.Is.
var (
	// ErrUnsafe: the state directory belongs to another user, or group or others
	// may write it. See *UnsafeError.
	ErrUnsafe = errors.New("statedir: the state directory is not safe")
	// ErrSymlink: a file the agent reads from its state directory is a symbolic
	// link. See *FileError.
	ErrSymlink = errors.New("statedir: a state file is a symbolic link")
	// ErrNotOwned: a file the agent reads from its state directory belongs to
	// another user. See *FileError.
	ErrNotOwned = errors.New("statedir: a state file belongs to another user")
	// ErrNotDir: something other than a directory is where the state directory
	// belongs. See *NotDirError.
	ErrNotDir = errors.New("statedir: the state directory is not a directory")
)

// ErrUnreachable is UnreachableError's kind.
var ErrUnreachable = errors.New("statedir: the state directory cannot be reached")

// UnreachableError is a state directory behind a directory this user (EUID) may not
// pass through.
type UnreachableError struct {
	Dir  string
	EUID int
	Err  error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("the state directory %s cannot be reached as %s: a directory above it does not let this user through (%v). "+
		"Run meshhost as the user the agent runs as (sudo meshhost … for root, sudo -u NAME meshhost … for another)", e.Dir, who(e.EUID), e.Err)
}

// Is reports whether target is ErrUnreachable.
func (e *UnreachableError) Is(target error) bool { return target == ErrUnreachable }

// Unwrap returns the error of the look at the directory.
func (e *UnreachableError) Unwrap() error { return e.Err }

// UnsafeError is a state directory the agent does not trust: UID owns it and the
// agent runs as EUID, or its Mode lets group or others write it.
type UnsafeError struct {
	Dir       string
	UID, EUID int
	Mode      fs.FileMode
	// NoAccess: EUID may not enter the directory. Then it is someone else's that
	// this user merely cannot read (meshhost run by hand as another user than the
	// agent's), not one planted for it: handing it to this user (chown) would give
	// the node's private key to the wrong one.
	NoAccess bool
}

func (e *UnsafeError) Error() string {
	writable := e.Mode.Perm()&0o022 != 0
	if e.UID != e.EUID && e.NoAccess {
		msg := fmt.Sprintf("the state directory %s belongs to %s, with mode %#o, and meshhost runs as %s, which may not enter it; nothing was read from it or written to it. "+
			"Run meshhost as the user the agent runs as, most likely the directory's owner, %s (sudo meshhost … for root, sudo -u NAME meshhost … for another)",
			e.Dir, who(e.UID), e.Mode.Perm(), who(e.EUID), who(e.UID))
		if writable {
			msg += fmt.Sprintf(". Group or others may also write it, so as that user check that its files are the ones meshhost wrote, then: chmod 700 %s", e.Dir)
		}
		return msg
	}
	what := fmt.Sprintf("has mode %#o: group or others may write it", e.Mode.Perm())
	fix := "Check"
	if e.UID != e.EUID {
		what = fmt.Sprintf("belongs to %s, with mode %#o, and meshhost runs as %s", who(e.UID), e.Mode.Perm(), who(e.EUID))
		// This user may enter it: it may be the agent's own directory, with
		// meshhost run here as another user, or one someone else made for the
		// agent. Only the second is this user's to take.
		fix = fmt.Sprintf("If the agent runs as %s, run meshhost as that user instead. If it runs as %s, check", who(e.UID), who(e.EUID))
	}
	return fmt.Sprintf("the state directory %s %s. It holds this node's private key and the keys it trusts, "+
		"so only the user meshhost runs as may own and write it; nothing was read from it or written to it. "+
		"%s that its files are the ones meshhost wrote (anyone who could write there may have replaced them), then: chown %d %s && chmod 700 %s",
		e.Dir, what, fix, e.EUID, e.Dir, e.Dir)
}

// Is reports whether target is ErrUnsafe.
func (e *UnsafeError) Is(target error) bool { return target == ErrUnsafe }

// NotDirError is a state directory that is something else: Mode is what is at Dir,
// its links followed; Link says Dir itself is a symbolic link. When Part is set,
// Dir does not exist, and Part, a directory above it, is not one: Mode is then
// Part's. It matches ErrNotDir.
type NotDirError struct {
	Dir  string
	Mode fs.FileMode
	Link bool
	Part string
}

func (e *NotDirError) Error() string {
	what := readfile.Kind(e.Mode)
	if e.Link {
		what = "a symbolic link to " + what
	}
	if e.Part != "" {
		return fmt.Sprintf("the state directory %s cannot be there: %s, on its path, is %s, not a directory; nothing was read or written. "+
			"Give the path of a directory (ls -ld %s shows what is there)", e.Dir, e.Part, what, e.Part)
	}
	return fmt.Sprintf("the state directory %s is not a directory: it is %s; nothing was read from it or written to it. "+
		"--state names the directory meshhost enrol made (the one holding %s), not a file in it (ls -l %s shows what is there)",
		e.Dir, what, "identity.json", e.Dir)
}

// Is reports whether target is ErrNotDir.
func (e *NotDirError) Is(target error) bool { return target == ErrNotDir }

// FileError is a file in the state directory the agent will not read: Kind is
// ErrSymlink or ErrNotOwned (then UID owns it, and the agent runs as EUID).
type FileError struct {
	Path      string
	Kind      error
	UID, EUID int
}

func (e *FileError) Error() string {
	if e.Kind == ErrSymlink {
		return fmt.Sprintf("%s is a symbolic link: meshhost reads the files of its state directory only as regular files there, never through a link, "+
			"since whoever put one there could make it trust their own identity; nothing was read through it. "+
			"See where it points (ls -l %s), put the real file back in its place, and let no one but the user meshhost runs as write the directory", e.Path, e.Path)
	}
	return fmt.Sprintf("%s belongs to %s, and meshhost runs as %s: a file another user owns in the state directory may have been put there by them; "+
		"it was not read. Check that it is the one meshhost wrote, then: chown %d %s", e.Path, who(e.UID), who(e.EUID), e.EUID, e.Path)
}

// Is reports whether target is the kind of file refused.
func (e *FileError) Is(target error) bool { return target == e.Kind }

// FileOwner returns the numeric owner of the file fi describes; false where files
// have none (Windows).
func FileOwner(fi fs.FileInfo) (int, bool) { return owner(fi) }

// Prepare creates dir (mode 0700, and its missing parents) if it is absent, and
// checks it as Check does: what enrolment does before it writes anything there. A
// directory it may not make, on a read-only or full file system, is a
// *dirlock.NotWritableError, as one it may not write; one under a file is a
// *NotDirError.
func Prepare(dir string) error {
	// Flushed into its parent: the identity enrolment writes durably in it is lost
	// with the directory's name otherwise.
	if err := atomicfile.MkdirAll(dir, 0o700); err != nil {
		if errors.Is(err, syscall.ENOTDIR) {
			if cerr := Check(dir); errors.Is(cerr, ErrNotDir) {
				return cerr
			}
		}
		if dirlock.NotWritable(err) {
			return &dirlock.NotWritableError{What: "state directory", Dir: dir, Err: err}
		}
		return fmt.Errorf("creating the state directory: %w", err)
	}
	return Check(dir)
}

// Create is Prepare for a command that takes back what it made when it saved
// nothing there (enrol: a refused token, a full disk). It returns the directories it
// made, dir first, then the parents it made, nearest first; an error with them, when
// it made some before it failed.
func Create(dir string) (made []string, err error) {
	for d := filepath.Clean(dir); ; {
		if _, err := os.Lstat(d); !errors.Is(err, fs.ErrNotExist) {
			break
		}
		made = append(made, d)
		parent := filepath.Dir(d)
		if parent == d {
			break
		}
		d = parent
	}
	err = Prepare(dir)
	for len(made) > 0 {
		if _, serr := os.Lstat(made[len(made)-1]); serr == nil {
			break
		}
		made = made[:len(made)-1] // not made after all: the failure came first
	}
	return made, err
}

// RemoveMade takes back the directories Create made, when nothing was saved in
// them: the state directory only if it holds nothing but its lock file (so an
// enrolment's pending key, kept for a run with the same token, keeps it), then the
// parents Create made, each only if empty. Call it with the directory's lock held:
// a process that opened the lock file meanwhile is refused it, and one that comes
// later makes the directory afresh. It reports whether it removed the directory.
func RemoveMade(made []string) (bool, error) {
	if len(made) == 0 {
		return false, nil
	}
	dir := made[0]
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, e := range entries {
		if e.Name() != dirlock.File || !e.Type().IsRegular() {
			return false, nil
		}
	}
	if len(entries) == 1 {
		if err := os.Remove(filepath.Join(dir, dirlock.File)); err != nil {
			return false, err
		}
	}
	for _, d := range made {
		if err := os.Remove(d); err != nil {
			return d != dir, nil // a parent in use since: left
		}
	}
	return true, nil
}

// Check refuses a state directory that another user owns or that group or others
// may write (*UnsafeError), or under a directory that a user other than the
// agent's and root owns or may write (*UnsafePathError), or that is not a directory
// (*NotDirError). An absent one gives an error
// matching fs.ErrNotExist: whether that is a fault is the caller's to say. Where
// files have no owner (not Unix), only that it is a directory is checked.
func Check(dir string) error {
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrPermission) {
		// A directory above it this user may not pass through: the agent's,
		// run by hand as another user.
		return &UnreachableError{Dir: dir, EUID: os.Geteuid(), Err: err}
	}
	if errors.Is(err, syscall.ENOTDIR) {
		// --state /etc/hosts/h1: said as the file on the way it is, not as
		// "stat …: not a directory".
		if part, mode, ok := FileOnPath(dir); ok {
			return &NotDirError{Dir: dir, Mode: mode, Part: part}
		}
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		lfi, err := os.Lstat(dir)
		return &NotDirError{Dir: dir, Mode: fi.Mode(), Link: err == nil && lfi.Mode()&fs.ModeSymlink != 0}
	}
	uid, ok := owner(fi)
	if !ok {
		return nil
	}
	if euid := os.Geteuid(); uid != euid || fi.Mode().Perm()&0o022 != 0 {
		// Naming a path inside it needs the right to enter (search) it; Join
		// would clean the "." away.
		_, err := os.Stat(dir + string(os.PathSeparator) + ".")
		return &UnsafeError{Dir: dir, UID: uid, EUID: euid, Mode: fi.Mode(), NoAccess: errors.Is(err, fs.ErrPermission)}
	}
	// Whoever may replace a directory above it may put another state directory in
	// its place: an older one of the agent's own (its applied state rolled back), or
	// one trusting another mesh.
	return CheckParents("the state directory", dir)
}

// FileOnPath finds the part of path, a directory above it, that exists and is not
// a directory (its links followed), and what it is: what a path that failed with
// ENOTDIR ("stat X/sub: not a directory") names as its fault.
func FileOnPath(path string) (string, fs.FileMode, bool) {
	for d := filepath.Dir(filepath.Clean(path)); ; {
		if fi, err := os.Stat(d); err == nil {
			if !fi.IsDir() {
				return d, fi.Mode(), true
			}
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", 0, false
		}
		d = parent
	}
}

// Open opens the state file at path to read it: never through a symbolic link at its
// name (*FileError, ErrSymlink), without waiting if a FIFO is there, and only if it is
// a regular file (an error wrapping syscall.EISDIR for a directory) that belongs to
// the user the agent runs as (*FileError, ErrNotOwned). Its facts come from the open
// descriptor, so what is checked is what is read. Nothing at path gives an error
// matching fs.ErrNotExist.
func Open(path string) (*os.File, fs.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|openFlags, 0)
	if err != nil {
		if isLink(path, err) {
			return nil, nil, &FileError{Path: path, Kind: ErrSymlink}
		}
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err == nil {
		err = checkOpened(path, fi)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// isLink reports whether an open that did not follow links failed because path is
// one: ELOOP on Linux, another error number elsewhere, so the name is looked at
// again (only when the open failed).
func isLink(path string, openErr error) bool {
	if errors.Is(openErr, fs.ErrNotExist) {
		return false
	}
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode()&fs.ModeSymlink != 0
}

func checkOpened(path string, fi fs.FileInfo) error {
	switch {
	case fi.IsDir():
		return &fs.PathError{Op: "read", Path: path, Err: errIsDir}
	case !fi.Mode().IsRegular():
		return &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("it is %s, not a regular file", readfile.Kind(fi.Mode()))}
	}
	if uid, ok := owner(fi); ok && uid != os.Geteuid() {
		return &FileError{Path: path, Kind: ErrNotOwned, UID: uid, EUID: os.Geteuid()}
	}
	return nil
}

// who names a user id, with its name when this machine knows it.
func who(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil && u.Username != "" {
		return fmt.Sprintf("uid %d (%s)", uid, u.Username)
	}
	return fmt.Sprintf("uid %d", uid)
}
