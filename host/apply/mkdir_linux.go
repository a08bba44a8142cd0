//go:build linux

package apply

import (
	"fmt"
	"io"
	"io/fs"
	"os"
)

// settleDir gives the directory just made at p (called name, in parent) the
// documented mode 0755, which Mkdir's may lack under the agent's umask. It opens
// the directory relative to its parent's descriptor without following a link at
// its name, and changes the mode on that descriptor, only if it still is the
// directory the agent made: its own, and empty. By name, a local user who may write
// in the managed root could swap a link in for the new directory between the
// two steps, and the chmod would land on what it points to: a file declared 0600
// made readable by everyone.
func (r *run) settleDir(parent *dirHandle, p, name string) error {
	// Under the usual umask (022) Mkdir made it 0755 already: one look, without
	// following a link at its name, and nothing to change.
	if proot, err := parent.writeRoot(); err == nil {
		if fi, err := proot.Lstat(name); err == nil && fi.IsDir() && fi.Mode().Perm() == 0o755 {
			return nil
		}
	}
	dir, err := parent.dirFile()
	if err != nil {
		return err
	}
	f, err := openDirIn(dir, name, p, nil)
	if err != nil {
		return fmt.Errorf("the directory %s the agent just made was replaced (%w): something else writes in the managed root", p, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Mode().Perm() == 0o755 {
		return nil
	}
	uid, _ := owner(fi)
	if uid >= 0 && uid != os.Geteuid() {
		return fmt.Errorf("the directory %s the agent just made was replaced by another user's: something else writes in the managed root", p)
	}
	if names, err := f.Readdirnames(1); len(names) > 0 || err != nil && err != io.EOF {
		return fmt.Errorf("the directory %s the agent just made was replaced by one that is not empty: something else writes in the managed root", p)
	}
	return f.Chmod(fs.FileMode(0o755))
}
