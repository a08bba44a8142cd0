package main

import (
	"fmt"
	"io"
	"os"

	"mesh/controlplane/datadir"
)

// privateOutput makes w, when it is a regular file (stdout redirected: `meshctl token
// ... > token.txt`), readable by its owner only, before a token is written to it.
// The shell creates that file with the user's umask, 0644 under the usual 022, and a
// token admits its node to whoever presents it first: every local user could have read
// it for as long as it lives. A file another user owns is refused whatever its mode:
// its owner can read it, or make it readable again, after the token is in it (one
// created beforehand in a shared directory, where the redirection only truncates
// it). A pipe or a terminal is left as it is. A file that cannot be made private gets
// no token, and is named.
func privateOutput(w io.Writer) error {
	f, ok := w.(*os.File)
	if !ok {
		return nil
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil
	}
	if uid, ok := datadir.FileOwner(fi); ok && uid != os.Geteuid() {
		return fmt.Errorf("stdout is a file another user owns (uid %d), who could read the token in it; no token was minted: write it to a file of your own (remove that one first), or through a pipe", uid)
	}
	if fi.Mode().Perm()&0o077 == 0 {
		return nil
	}
	if err := f.Chmod(fi.Mode().Perm() &^ 0o077); err != nil {
		return fmt.Errorf("stdout is a file other users may read (mode %v), and it could not be made private (%w); no token was minted: write it to a file of your own, or through a pipe", fi.Mode().Perm(), err)
	}
	return nil
}
