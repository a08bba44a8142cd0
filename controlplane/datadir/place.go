package datadir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"mesh/host/statedir"
)

// CheckPlace refuses a data directory in a place another user could change: a
// directory above it, its links resolved, that another user than this one and root
// owns or that group or others may write (one with the sticky bit, as /tmp, passes),
// a symbolic link on the way another user owns, and, once it exists, the directory
// itself unless it is this user's and group and others may not write it. Whoever
// could change a directory above it could swap the data directory for another one
// (an older copy: revocations undone) or, before bootstrap and join write in it,
// aim the CA key and the Raft store at a place of theirs. bootstrap and join check
// it before they write anything, serve as it starts.
func (d Dir) CheckPlace() error {
	return d.checkPlace(true)
}

// CheckPlaceToRead is CheckPlace for a command that only reads the data directory
// (an operator's `--data`): the directory may be another user's (serve's, read by
// root), but neither it nor a directory above it may be one others could change.
func (d Dir) CheckPlaceToRead() error {
	return d.checkPlace(false)
}

func (d Dir) checkPlace(own bool) error {
	// Its kind before its mode (a device's mode is not the data directory's to
	// mend), and a file on the way to it before the parents (CheckParents would
	// say only "not a directory").
	if err := d.CheckIsDir(); err != nil {
		return err
	}
	if err := statedir.CheckParents("the data directory", string(d)); err != nil {
		var ue *statedir.UnsafePathError
		if errors.As(err, &ue) {
			return unsafePlace(ue)
		}
		return err
	}
	fi, err := os.Stat(string(d))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	euid := os.Geteuid()
	if uid, ok := FileOwner(fi); ok && own && uid != euid {
		return &UnprotectedError{Path: string(d), Problem: fmt.Sprintf("belongs to %s, and meshctl runs as %s", userName(uid), userName(euid)),
			Fix: fmt.Sprintf("use a directory of your own (remove this one, or chown -R %d %s if it is yours)", euid, d)}
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return &UnprotectedError{Path: string(d), Problem: fmt.Sprintf("has mode %#o: group or others may write it", fi.Mode().Perm()),
			Fix: fmt.Sprintf("chmod %s %s", fixedMode(fi, 0o022), d)}
	}
	return nil
}

// unsafePlace says, in the data directory's words, what statedir found wrong on
// the way to it.
func unsafePlace(e *statedir.UnsafePathError) error {
	problem := fmt.Sprintf("has mode %#o: group or others may write it, and so replace the data directory below it", e.Mode.Perm())
	fix := "choose a data directory whose parents only you or root may change, or chmod go-w " + e.Part
	if e.UID != e.EUID && e.UID != 0 {
		problem = fmt.Sprintf("belongs to %s, who may replace the data directory below it", userName(e.UID))
		if e.Mode&fs.ModeSymlink != 0 {
			problem = fmt.Sprintf("is a symbolic link that belongs to %s, who may point it elsewhere at any time", userName(e.UID))
		}
		fix = "choose a data directory whose parents only you or root may change"
	}
	return &UnprotectedError{Path: e.Part, Problem: problem + " (it is on the way to " + e.Path + ")", Fix: fix}
}
