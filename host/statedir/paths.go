package statedir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"mesh/host/readfile"
)

// ErrUnsafePath: a file the agent acts on (the hooks file) or a directory above the
// managed root can be changed by another user than the agent's and root. See
// *UnsafePathError.
var ErrUnsafePath = errors.New("statedir: a path the agent trusts can be changed by another user")

// UnsafePathError is a path the agent does not trust: Part, the path with its
// links resolved or a directory above it, belongs to UID (the agent runs as EUID)
// or has Mode, which lets group or others write it.
type UnsafePathError struct {
	What      string // what the path is to the agent: "the hooks file", "the managed root"
	Path      string // as given
	Part      string // the resolved path, or the directory above it, at fault
	UID, EUID int
	Mode      fs.FileMode
}

func (e *UnsafePathError) Error() string {
	why := fmt.Sprintf("has mode %#o: group or others may write it", e.Mode.Perm())
	if e.UID != e.EUID && e.UID != 0 {
		why = fmt.Sprintf("belongs to %s", who(e.UID))
		if e.Mode&fs.ModeSymlink != 0 {
			why = fmt.Sprintf("is a symbolic link that belongs to %s (its owner may point it elsewhere at any time)", who(e.UID))
		}
	}
	part := e.Part
	if part == e.Path {
		part = "it"
	}
	return fmt.Sprintf("%s %s cannot be used: %s %s, so another user could change or replace what meshhost (running as %s) acts on. "+
		"Only meshhost's user or root may own or write it and every directory above it (a directory with the sticky bit, as /tmp, is fine); "+
		"fix the owner or mode, or choose another place", e.What, e.Path, part, why, who(e.EUID))
}

// Is reports whether target is ErrUnsafePath.
func (e *UnsafePathError) Is(target error) bool { return target == ErrUnsafePath }

// CheckFile refuses a file the agent acts on, as OpenSSH's StrictModes does for
// authorized_keys: resolved of its links, it and every directory above it must
// belong to the agent's user or root and not be writable by group or others; a
// directory above it with the sticky bit passes, since no one may rename or remove
// another's entry there. It returns the resolved path, which the caller opens.
// Where files have no owner (not Unix), nothing is checked.
func CheckFile(what, path string) (string, error) {
	if err := checkLinks(what, path); err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", err
	}
	real, err = filepath.Abs(real)
	if err != nil {
		return "", err
	}
	return real, checkChain(what, path, real, true)
}

// OpenFile opens, to read it, a file the agent acts on that passes CheckFile, as a
// regular file only (without waiting if a FIFO is there): anything else is a
// *readfile.NotRegularError (readfile.ErrNotRegular), decided before its owner and
// mode are, since advice to chmod a device (/dev/zero given as the hooks file)
// would break the device for the whole machine and leave the mistake in place.
func OpenFile(what, path string) (*os.File, error) {
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		return nil, &readfile.NotRegularError{Path: path, Mode: fi.Mode()}
	}
	real, err := CheckFile(what, path)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(real, os.O_RDONLY|openFlags, 0)
	if err != nil {
		return nil, err
	}
	// Looked at again on the descriptor: what is read is what was judged.
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = &readfile.NotRegularError{Path: path, Mode: fi.Mode()}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// CheckParents refuses a directory the agent writes in (the managed root) whose
// parents another user could change: resolved of its links, every directory above
// it must pass CheckFile's rules. The directory itself is not judged (a managed root
// others may write in is the operator's choice), and the parts at its end that do
// not exist yet are skipped (the agent makes a missing managed root as it starts,
// PrepareRoot, and an apply makes it again should it be removed since from the
// directory it was in: apply.RootGuard).
func CheckParents(what, dir string) error {
	if err := checkLinks(what, dir); err != nil {
		return err
	}
	real, err := Resolved(dir)
	if err != nil {
		return err
	}
	return checkChain(what, dir, real, false)
}

// CheckRoot judges the managed root at dir: every directory above it by
// CheckParents' rules, and the root itself, once it exists, must belong to the
// agent's user or root (others may write in it: the operator's choice). The agent
// checks it as it starts and each time an apply opens a root it has not judged
// before (apply.RootGuard): a path with parts that did not exist at the start may
// have been made since by another user.
func CheckRoot(what, dir string) error {
	if judged, err := checkRootWithoutLinks(what, dir); judged {
		return err
	}
	return checkRootWalk(what, dir)
}

// checkRootWalk is CheckRoot for any path, links and all: the directories above by
// CheckParents' walk, then the root's owner.
func checkRootWalk(what, dir string) error {
	if err := CheckParents(what, dir); err != nil {
		return err
	}
	real, err := Resolved(dir)
	if err != nil {
		return err
	}
	fi, err := os.Lstat(real)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	euid := os.Geteuid()
	if uid, ok := owner(fi); ok && uid != euid && uid != 0 {
		return &UnsafePathError{What: what, Path: dir, Part: real, UID: uid, EUID: euid, Mode: fi.Mode()}
	}
	return nil
}

// checkRootWithoutLinks is CheckRoot for the usual path, one with no symbolic link
// on its way: each existing part is looked at once (lstat), where CheckRoot's general
// walk looks at each three times (its links, their resolution, the chain), and the
// verdict is the same (TestCheckRootWithoutLinksAgrees). It reports judged false,
// leaving the path to the general walk, when it meets a link or an error other than
// a part that does not exist.
func checkRootWithoutLinks(what, dir string) (judged bool, err error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return false, nil
	}
	sep := string(filepath.Separator)
	type part struct {
		path string
		fi   fs.FileInfo
	}
	fi, err := os.Lstat(sep)
	if err != nil {
		return false, nil
	}
	parts := []part{{sep, fi}}
	cur, whole := sep, true
	for _, name := range strings.Split(strings.TrimPrefix(abs, sep), sep) {
		if name == "" {
			continue
		}
		next := filepath.Join(cur, name)
		fi, err := os.Lstat(next)
		if errors.Is(err, fs.ErrNotExist) {
			whole = false
			break
		}
		if err != nil || fi.Mode()&fs.ModeSymlink != 0 {
			return false, nil
		}
		parts = append(parts, part{next, fi})
		cur = next
	}
	// As CheckRoot judges: the directories above, nearest first, then the root
	// itself by its owner alone (others may write in it).
	euid := os.Geteuid()
	above := parts
	if whole {
		above = parts[:len(parts)-1]
	}
	for i := len(above) - 1; i >= 0; i-- {
		p := above[i]
		uid, ok := owner(p.fi)
		if !ok {
			continue
		}
		writable := p.fi.Mode().Perm()&0o022 != 0 && !(p.fi.IsDir() && p.fi.Mode()&fs.ModeSticky != 0)
		if uid != euid && uid != 0 || writable {
			return true, &UnsafePathError{What: what, Path: dir, Part: p.path, UID: uid, EUID: euid, Mode: p.fi.Mode()}
		}
	}
	if whole {
		root := parts[len(parts)-1]
		if uid, ok := owner(root.fi); ok && uid != euid && uid != 0 {
			return true, &UnsafePathError{What: what, Path: dir, Part: root.path, UID: uid, EUID: euid, Mode: root.fi.Mode()}
		}
	}
	return true, nil
}

// Resolved returns p made absolute, with the links of its longest existing part
// resolved (what is beyond that part does not exist yet).
func Resolved(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	rest := ""
	for cur := abs; ; {
		real, err := filepath.EvalSymlinks(cur)
		if err == nil {
			return filepath.Join(real, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return "", err
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}

// checkLinks refuses a symbolic link on the way to path that another user than the
// agent's or root owns: the chain checked once its links are resolved says nothing
// of the links themselves, and a link another user planted in a sticky directory
// (/tmp/mroot pointing into /root) made the agent write there as root, where the
// kernel's fs.protected_symlinks is off. Every link met is judged, and so is the
// way to its target. Parts that do not exist are skipped.
func checkLinks(what, path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	return walkLinks(what, path, abs, 0)
}

// maxLinks bounds the links walkLinks follows, as the kernel's ELOOP does.
const maxLinks = 40

func walkLinks(what, path, abs string, followed int) error {
	euid := os.Geteuid()
	parts := strings.Split(strings.TrimPrefix(filepath.Clean(abs), string(filepath.Separator)), string(filepath.Separator))
	cur := string(filepath.Separator)
	for _, part := range parts {
		if part == "" {
			continue
		}
		next := filepath.Join(cur, part)
		fi, err := os.Lstat(next)
		if err != nil {
			return nil // what does not exist yet is made later; other errors are the chain's to report
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			if uid, ok := owner(fi); ok && uid != euid && uid != 0 {
				return &UnsafePathError{What: what, Path: path, Part: next, UID: uid, EUID: euid, Mode: fi.Mode()}
			}
			if followed++; followed > maxLinks {
				return nil // the kernel refuses it (ELOOP) when it is used
			}
			target, err := os.Readlink(next)
			if err != nil {
				return nil
			}
			if !filepath.IsAbs(target) {
				target = filepath.Join(cur, target)
			}
			if err := walkLinks(what, path, target, followed); err != nil {
				return err
			}
			if next, err = filepath.EvalSymlinks(next); err != nil {
				return nil
			}
		}
		cur = next
	}
	return nil
}

// checkChain checks real (absolute, no links) and the directories above it: self
// says whether real itself is judged too. Parts that do not exist are skipped.
func checkChain(what, path, real string, self bool) error {
	euid := os.Geteuid()
	for p, first := real, true; ; first = false {
		fi, err := os.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return err
		case !first || self:
			if uid, ok := owner(fi); ok {
				writable := fi.Mode().Perm()&0o022 != 0 && !(fi.IsDir() && fi.Mode()&fs.ModeSticky != 0 && !first)
				if uid != euid && uid != 0 || writable {
					return &UnsafePathError{What: what, Path: path, Part: p, UID: uid, EUID: euid, Mode: fi.Mode()}
				}
			}
		}
		parent := filepath.Dir(p)
		if parent == p {
			return nil
		}
		p = parent
	}
}

// InputError is an input a command takes its trust from (a token: the mesh's CA pin
// and signing key; a CA certificate) that another user could have written: it
// belongs to UID, or has Mode, which lets group or others write it.
type InputError struct {
	What   string // "the token file"
	Name   string // its path, or "stdin"
	Holds  string // what another mesh's version would be: "token"
	Advice string // how to keep it safe, after "Keep it where only you or root may change it"
	// Could says what another user could have done through it, when "put another
	// mesh's <Holds> in it, which this command … would then trust" does not fit.
	Could     string
	UID, EUID int
	Mode      fs.FileMode
}

func (e *InputError) Error() string {
	why := fmt.Sprintf("has mode %#o: group or others may write it", e.Mode.Perm())
	if e.Mode.Perm()&0o022 == 0 {
		why = fmt.Sprintf("belongs to %s", who(e.UID))
	}
	if e.Could != "" {
		return fmt.Sprintf("%s %s cannot be used: it %s, so another user could have %s (running as %s). "+
			"Keep it where only you or root may change it%s", e.What, e.Name, why, e.Could, who(e.EUID), e.Advice)
	}
	return fmt.Sprintf("%s %s cannot be used: it %s, so another user could have put another mesh's %s in it, which this command (running as %s) would then trust. "+
		"Keep it where only you or root may change it%s", e.What, e.Name, why, e.Holds, who(e.EUID), e.Advice)
}

// Is reports whether target is ErrUnsafePath.
func (e *InputError) Is(target error) bool { return target == ErrUnsafePath }

// CheckInput judges, as opened, a file a command takes a token from: it must
// belong to root, the command's user or invoker (the user who ran it through sudo,
// -1 for none), and group or others must not be able to write it. A user who created
// /tmp/token.txt 0666 before the operator wrote the token in it could otherwise put
// their own mesh's token there, and the machine would enrol into it. A pipe, a
// terminal or another kind of file is not judged (see readfile.Stream); where files
// have no owner (not Unix), nothing is.
func CheckInput(what, name string, fi fs.FileInfo, invoker int) error {
	return CheckTrusted(&InputError{What: what, Name: name, Holds: "token",
		Advice: " (`meshctl token > token.txt` writes it 0600), or give it in MESH_TOKEN or on a pipe"}, fi, invoker)
}

// CheckTrusted is CheckInput for any file a command takes its trust from, in as
// (What, Name, Holds and Advice set; the rest is filled in when refused).
func CheckTrusted(as *InputError, fi fs.FileInfo, invoker int) error {
	if !fi.Mode().IsRegular() {
		return nil
	}
	uid, ok := owner(fi)
	if !ok {
		return nil
	}
	euid := os.Geteuid()
	if fi.Mode().Perm()&0o022 != 0 || uid != 0 && uid != euid && uid != invoker {
		e := *as
		e.UID, e.EUID, e.Mode = uid, euid, fi.Mode()
		return &e
	}
	return nil
}

// Invoker is the user who ran this command through sudo (SUDO_UID, read with getenv)
// when it runs as root, for CheckInput and CheckTrusted; -1 otherwise: that user could
// have run it without sudo, and their files are theirs to hand it.
func Invoker(getenv func(string) string) int {
	if os.Geteuid() != 0 {
		return -1
	}
	if uid, err := strconv.Atoi(getenv("SUDO_UID")); err == nil && uid > 0 {
		return uid
	}
	return -1
}

// ReadableByOthers reports whether a regular file's mode lets group or others read
// it: a secret in it may have been copied.
func ReadableByOthers(fi fs.FileInfo) bool {
	return fi.Mode().IsRegular() && fi.Mode().Perm()&0o044 != 0
}

// Within reports whether p is root or lies below it, both as Resolved returns
// them. It judges by name and by identity: a directory on p's way that is root's
// very directory (os.SameFile) counts, so that a second spelling of root (another
// case on a file system that folds it: macOS, Windows, a casefold directory; a
// bind mount) does not place a path outside root that is in it.
func Within(p, root string) bool {
	if rel, err := filepath.Rel(root, p); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return true
	}
	r, err := os.Stat(root)
	if err != nil {
		return false
	}
	for q := p; ; {
		if fi, err := os.Stat(q); err == nil && os.SameFile(fi, r) {
			return true
		}
		parent := filepath.Dir(q)
		if parent == q {
			return false
		}
		q = parent
	}
}
