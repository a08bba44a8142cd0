package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"mesh/controlplane/datadir"
	"mesh/host/writeerr"
	"mesh/tokenfmt"
)

// tokenOutput is where a token is written: stdout, or, when stdout is a new file
// others could open (`meshctl token ... > token.txt` under umask 022), a private file
// that takes that file's place once the token is in it (commit).
type tokenOutput struct {
	w io.Writer
	// commit finishes the output once the token is written to w (ok), or drops it
	// (not ok). Nil when there is nothing to finish.
	commit func(ok bool) error
}

// errOutputExposed means stdout is a file a token must not be written to: others
// could read it, or it is another user's. Nothing was minted.
var errOutputExposed = errors.New("a token must not be written there")

// privateOutput decides where a token goes instead of w, before anything is minted:
// a token admits its node to whoever presents it first.
//
// A pipe or a terminal of this user is w itself. A file or a FIFO another user owns
// is refused: its owner reads what goes in (one created beforehand in a shared
// directory, where the redirection only truncates it). A regular file only this user
// may read is w. A regular file group or others may read, as the shell makes
// token.txt under umask 022, may already be open in another user's process, which
// would read the token through that descriptor however the file's mode changes
// next: so the token is not written to it, but to a new file, mode 0600, in the
// same directory, renamed over it once written; the file the shell made is left
// empty and unlinked. That needs the file's name (Linux: /proc/self/fd) and the file
// empty; else the token is refused there (a file others may read that holds data
// already, as with >>, may be read by whoever holds it open).
func privateOutput(w io.Writer) (tokenOutput, error) {
	out := tokenOutput{w: w}
	f, ok := outputFile(w)
	if !ok {
		return out, nil
	}
	fi, err := f.Stat()
	if err != nil {
		return out, nil
	}
	if uid, ok := datadir.FileOwner(fi); ok && uid != os.Geteuid() && (fi.Mode().IsRegular() || fi.Mode()&fs.ModeNamedPipe != 0) {
		// A pipe another user's shell made (`runuser -u meshctl -- meshctl token |
		// cat` from root's) is refused as theirs: not "through a pipe" as the
		// way out (a walkthrough).
		return out, fmt.Errorf("%w: stdout is a %s another user owns (uid %d), who could read the token in it; no token was minted: write it with --out FILE, a file of this user's (mode 0600), or to a file or pipe this user made",
			errOutputExposed, fileKind(fi), uid)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o077 == 0 {
		return out, nil
	}
	advice := "no token was minted: write it to a new file (`meshctl token ... > new.txt`), create the file under `umask 077` first, or give it through a pipe"
	if fi.Size() > 0 {
		return out, fmt.Errorf("%w: stdout is a file group or others may read (mode %v) that holds data already (>>): a process that opened it may read what is appended, whatever its mode becomes; %s",
			errOutputExposed, fi.Mode().Perm(), advice)
	}
	name, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
	if err != nil || !filepath.IsAbs(name) {
		return out, fmt.Errorf("%w: stdout is a file group or others may read (mode %v), which another process may have opened already; %s", errOutputExposed, fi.Mode().Perm(), advice)
	}
	if at, err := os.Lstat(name); err != nil || !os.SameFile(at, fi) {
		return out, fmt.Errorf("%w: stdout is a file group or others may read (mode %v), and %s no longer names it; %s", errOutputExposed, fi.Mode().Perm(), name, advice)
	}
	tmp, tmpName, err := privateTemp(name)
	if err != nil {
		return out, fmt.Errorf("%w: stdout is a file group or others may read (mode %v), and no private file could be made beside it to take its place (%v); %s", errOutputExposed, fi.Mode().Perm(), err, advice)
	}
	out.w = tmp
	out.commit = func(ok bool) error {
		err := tmp.Sync()
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if !ok || err != nil {
			_ = os.Remove(tmpName)
			return err
		}
		// Only if the name still leads to the file the shell made: not over what
		// another took its place with.
		if at, lerr := os.Lstat(name); lerr != nil || !os.SameFile(at, fi) {
			_ = os.Remove(tmpName)
			return fmt.Errorf("%s was replaced while the token was minted; the token was not written", name)
		}
		if err := os.Rename(tmpName, name); err != nil {
			_ = os.Remove(tmpName)
			return err
		}
		// As --out's: a power cut could otherwise put back the empty file the
		// shell made, the token pending in the mesh and nowhere on disk.
		if d, err := os.Open(filepath.Dir(name)); err == nil {
			_ = d.Sync() // the new name survives a crash
			d.Close()
		}
		return nil
	}
	return out, nil
}

func fileKind(fi fs.FileInfo) string {
	if fi.Mode()&fs.ModeNamedPipe != 0 {
		return "pipe or FIFO" // Go's mode says the same for both
	}
	return "file"
}

// outputNotAFileError refuses `meshctl token --out NAME` where NAME is no regular
// file (a link, a directory, a FIFO), before anything is minted: a mistake of the
// command line, exit 2, as a file that holds data is. It matches errOutputExposed.
type outputNotAFileError struct {
	name string
	mode fs.FileMode
}

func (e *outputNotAFileError) Error() string {
	kind := fmt.Sprintf("not a regular file (%v)", e.mode.Type())
	switch {
	case e.mode&fs.ModeSymlink != 0:
		kind = "a symbolic link, which is not followed (the token's file would replace the link, not what it names)"
	case e.mode.IsDir():
		kind = "a directory"
	}
	return fmt.Sprintf("%v: --out %s is %s; no token was minted: name a file of your own, new or holding nothing", errOutputExposed, e.name, kind)
}

func (e *outputNotAFileError) Unwrap() error { return errOutputExposed }

// outputHoldsDataError refuses `meshctl token --out FILE` for a file that holds data
// already, before anything is minted: most likely the token an earlier run wrote
// there, whose secret it is the only copy of. --replace mints anew, cancelling the
// node's pending token, and replaces the file.
type outputHoldsDataError struct {
	name string
	size int64
}

func (e *outputHoldsDataError) Error() string {
	return fmt.Sprintf("--out %s holds data already (%d bytes: the token an earlier run wrote there?), and no token was minted, so the file and any token it holds are as they were: "+
		"hand that token out if it is the node's pending one (meshctl token list --node NODE shows it), or mint again with --replace, which cancels the node's pending token and replaces the file", e.name, e.size)
}

// fileOutput is where `meshctl token --out FILE` writes the token, decided before
// anything is minted: a new file, mode 0600, beside name, that takes name only once
// the token is in it (commit(true)), and is dropped otherwise. Written through a
// redirection (`> token.txt`), a second run of the same command line emptied the
// file before meshctl ran, and so the one copy of the first token's secret, which
// the refusal that followed (token_pending) told the operator to use. So a file
// that holds data is refused, nothing minted, unless replace (the --replace that
// also cancels the node's pending token); a file another user owns, or that is not
// a regular file (a link, a FIFO, a directory), is refused too. A name free at the
// check and taken by the commit is not written over (a hard link of the new file
// is made there, which fails on a name that exists). With replace, a file that holds
// data is written over only if it holds a token of node: --replace wrote over any
// file, a notes file or a copy of mesh.json, and a slip of --out destroyed another
// node's pending token, the one copy of its secret (a docs walkthrough).
func fileOutput(name string, replace bool, node string) (tokenOutput, error) {
	var out tokenOutput
	fi, err := os.Lstat(name)
	existed := err == nil
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return out, fmt.Errorf("--out %s: %w; no token was minted", name, err)
	case !fi.Mode().IsRegular():
		return out, &outputNotAFileError{name: name, mode: fi.Mode()}
	default:
		if uid, ok := datadir.FileOwner(fi); ok && uid != os.Geteuid() {
			return out, fmt.Errorf("%w: --out %s is a file another user owns (uid %d), who could read the token in it; no token was minted: name a file of your own", errOutputExposed, name, uid)
		}
		if fi.Size() > 0 && !replace {
			return out, &outputHoldsDataError{name: name, size: fi.Size()}
		}
		if fi.Size() > 0 {
			if err := holdsTokenOf(name, node); err != nil {
				return out, err
			}
		}
	}
	dir := filepath.Dir(name)
	tmp, tmpName, err := privateTemp(name)
	if err != nil {
		return out, fmt.Errorf("--out %s: no file can be made in %s (%w); no token was minted", name, dir, err)
	}
	out.w = tmp
	out.commit = func(ok bool) error {
		err := tmp.Sync()
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		// Gone by now after a rename; after a link, or a failure, its name goes.
		defer os.Remove(tmpName)
		if !ok || err != nil {
			return err
		}
		at, lerr := os.Lstat(name)
		switch {
		case replace && lerr == nil && (!existed || !os.SameFile(at, fi) || at.Size() != fi.Size() || !at.ModTime().Equal(fi.ModTime())):
			// What --replace was to write over was judged before the mint,
			// which may wait minutes for a leader: another node's token written
			// there since is not written over (a review).
			return &outputChangedError{name: name}
		case replace:
			err = os.Rename(tmpName, name)
		case lerr == nil && (!existed || !os.SameFile(at, fi) || at.Size() > 0):
			return fmt.Errorf("--out %s was written or made by another while the token was minted, and is left as it is", name)
		case lerr == nil:
			err = os.Rename(tmpName, name) // the empty file checked
		default:
			err = os.Link(tmpName, name)
		}
		if err != nil {
			return err
		}
		if d, err := os.Open(dir); err == nil {
			_ = d.Sync() // the new name survives a crash
			d.Close()
		}
		return nil
	}
	return out, nil
}

// outputChangedError says that --replace's file was written or made by another
// while the token was minted, and left as it is: the token minted is written
// nowhere.
type outputChangedError struct{ name string }

func (e *outputChangedError) Error() string {
	return fmt.Sprintf("--out %s was written or made by another while the token was minted, and is left as it is", e.name)
}

// notATokenFileError refuses `meshctl token --out FILE --replace` for a file that
// holds data other than a token of the node minted for: --replace writes over the
// node's earlier token, nothing else.
type notATokenFileError struct {
	name string
	// other is the node whose token the file holds; "" when it holds no token.
	other string
}

func (e *notATokenFileError) Error() string {
	if e.other != "" {
		return fmt.Sprintf("--out %s holds the token of %s, another node, perhaps its only copy; no token was minted, and the file is as it was: name the file of this node's token, or a new one", e.name, e.other)
	}
	return fmt.Sprintf("--out %s holds data that is not a join token; no token was minted, and the file is as it was: --replace writes over the node's earlier token only; name that file, or a new one", e.name)
}

// holdsTokenOf checks that the file name holds one join token, of node, expired or
// not (a token file is a token and a line break).
func holdsTokenOf(name, node string) error {
	f, err := os.Open(name)
	if err != nil {
		return fmt.Errorf("--out %s: %w; no token was minted", name, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 2*tokenfmt.MaxEncodedLen))
	if err != nil {
		return fmt.Errorf("--out %s: %w; no token was minted", name, err)
	}
	// The zero time: a token's expiry is no reason to keep its file.
	tok, err := tokenfmt.Parse(string(data), time.Time{})
	switch {
	case err != nil:
		return &notATokenFileError{name: name}
	case tok.Node != node:
		return &notATokenFileError{name: name, other: tok.Node}
	}
	return nil
}

// staleTemp is how old a private file left beside a token's file must be before
// a later run removes it: older than any run of meshctl token lasts (--timeout and
// --leader-wait are 10 minutes at most), so never one a run still writes.
const staleTemp = 30 * time.Minute

// privateTemp makes a new file, mode 0600, beside name, that takes name's place
// once a token is in it. It first removes the files of that form an earlier run
// left there: killed (SIGKILL, a power loss) between the mint and the rename, it
// left a live token in a file under a name nobody was told.
func privateTemp(name string) (*os.File, string, error) {
	dir, prefix := filepath.Dir(name), "."+filepath.Base(name)+".meshctl-"
	if entries, err := os.ReadDir(dir); err == nil {
		for _, e := range entries {
			if !strings.HasPrefix(e.Name(), prefix) || !e.Type().IsRegular() {
				continue
			}
			fi, err := e.Info()
			if uid, ok := datadir.FileOwner(fi); err == nil && ok && uid == os.Geteuid() && time.Since(fi.ModTime()) > staleTemp {
				_ = os.Remove(filepath.Join(dir, e.Name()))
			}
		}
	}
	var suffix [8]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return nil, "", err
	}
	tmpName := filepath.Join(dir, prefix+hex.EncodeToString(suffix[:]))
	tmp, err := os.OpenFile(tmpName, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	return tmp, tmpName, err
}

// outputFile is the file w writes to, through run's writeerr.Writer: stdout is
// written through it, and a check of the file that did not look through it was
// never made (a token written to a file others may read; a review).
func outputFile(w io.Writer) (*os.File, bool) {
	if o, ok := w.(*writeerr.Writer); ok {
		w = o.W
	}
	f, ok := w.(*os.File)
	return f, ok
}

// emptyFile reports whether w is an empty regular file: stdout redirected with `>`,
// which the shell empties before the command runs.
func emptyFile(w io.Writer) bool {
	f, ok := outputFile(w)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode().IsRegular() && fi.Size() == 0
}
