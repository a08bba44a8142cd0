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

	"mesh/controlplane/datadir"
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
	f, ok := w.(*os.File)
	if !ok {
		return out, nil
	}
	fi, err := f.Stat()
	if err != nil {
		return out, nil
	}
	if uid, ok := datadir.FileOwner(fi); ok && uid != os.Geteuid() && (fi.Mode().IsRegular() || fi.Mode()&fs.ModeNamedPipe != 0) {
		return out, fmt.Errorf("%w: stdout is a %s another user owns (uid %d), who could read the token in it; no token was minted: write it to a file of your own (remove that one first), or through a pipe",
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
	var suffix [8]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return out, err
	}
	tmpName := filepath.Join(filepath.Dir(name), "."+filepath.Base(name)+".meshctl-"+hex.EncodeToString(suffix[:]))
	tmp, err := os.OpenFile(tmpName, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
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
		return nil
	}
	return out, nil
}

func fileKind(fi fs.FileInfo) string {
	if fi.Mode()&fs.ModeNamedPipe != 0 {
		return "named pipe (FIFO)"
	}
	return "file"
}
