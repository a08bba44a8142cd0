//go:build linux

package apply

import (
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
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
	if fi, err := parent.lstat(name); err == nil && fi.IsDir() && fi.Mode().Perm() == 0o755 {
		return nil
	}
	pfd, err := parent.dirFd()
	if err != nil {
		return err
	}
	fd, err := openDirAt(pfd, name)
	if err != nil {
		return fmt.Errorf("the directory %s the agent just made was replaced (%w): something else writes in the managed root", p, dirOpenError(p, pfd, err))
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := fstat(fd, &st); err != nil {
		return &fs.PathError{Op: "fstat", Path: p, Err: err}
	}
	if st.Mode&0o777 == 0o755 {
		return nil
	}
	if int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("the directory %s the agent just made was replaced by another user's: something else writes in the managed root", p)
	}
	if empty, err := emptyDir(fd); !empty || err != nil {
		return fmt.Errorf("the directory %s the agent just made was replaced by one that is not empty: something else writes in the managed root", p)
	}
	if err := ignoringEINTR(func() error { return unix.Fchmod(fd, 0o755) }); err != nil {
		return &fs.PathError{Op: "chmod", Path: p, Err: err}
	}
	return nil
}

// emptyDir reports whether the directory open at fd holds no name but "." and "..".
func emptyDir(fd int) (bool, error) {
	buf := make([]byte, 1024)
	for {
		var n int
		if err := ignoringEINTR(func() (err error) { n, err = unix.ReadDirent(fd, buf); return err }); err != nil {
			return false, err
		}
		if n <= 0 {
			return true, nil
		}
		if _, count, _ := unix.ParseDirent(buf[:n], 1, nil); count > 0 {
			return false, nil
		}
	}
}
