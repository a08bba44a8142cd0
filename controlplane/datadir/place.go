package datadir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

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
	return d.checkPlace(dataPlace)
}

// CheckPlaceToRead is CheckPlace for a command that only reads the data directory
// (an operator's `--data`): the directory may be another user's (serve's, read by
// root), but neither it nor a directory above it may be one others could change.
func (d Dir) CheckPlaceToRead() error {
	return d.checkPlace(place{own: false, fixMask: 0o022})
}

// CheckBackupPlace is CheckPlace for a backup directory: each backup in it is a
// whole data directory, keys and credentials included, so it is judged as one,
// and named as what it is. Where group or others may write it, the mode advised
// is the one a backup directory is made with (0700: the backups' names are no
// one else's business either), not merely one without their write bits.
func CheckBackupPlace(dir string) error {
	return Dir(dir).checkPlace(place{own: true, fixMask: 0o077, backup: true})
}

// place is what checkPlace judges: whether the directory must be this user's
// (own), the bits its advised chmod takes away, and whether it is a backup
// directory (named so in what is refused).
type place struct {
	own     bool
	fixMask fs.FileMode
	backup  bool
}

// dataPlace is a data directory this user writes in (CheckPlace).
var dataPlace = place{own: true, fixMask: 0o022}

func (p place) name() string {
	if p.backup {
		return "the backup directory"
	}
	return "the data directory"
}

func (d Dir) checkPlace(p place) error {
	// Its kind before its mode (a device's mode is not the data directory's to
	// mend), and a file on the way to it before the parents (CheckParents would
	// say only "not a directory").
	if err := d.CheckIsDir(); err != nil {
		return err
	}
	if err := statedir.CheckParents(p.name(), string(d)); err != nil {
		var ue *statedir.UnsafePathError
		if errors.As(err, &ue) {
			return unsafePlace(ue, p)
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
	if uid, ok := FileOwner(fi); ok && p.own && uid != euid {
		return &UnprotectedError{Path: string(d), Problem: fmt.Sprintf("belongs to %s, and meshctl runs as %s", userName(uid), userName(euid)),
			Fix: fmt.Sprintf("use a directory of your own (remove this one, or chown -R %d %s if it is yours)", euid, d), Backup: p.backup}
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return &UnprotectedError{Path: string(d), Problem: fmt.Sprintf("has mode %#o: group or others may write it", fi.Mode().Perm()),
			Fix: fmt.Sprintf("chmod %s %s", fixedMode(fi, p.fixMask), d), Backup: p.backup}
	}
	return nil
}

// unsafePlace says, in the data directory's words, what statedir found wrong on
// the way to it.
func unsafePlace(e *statedir.UnsafePathError, p place) error {
	name := p.name()
	problem := fmt.Sprintf("has mode %#o: group or others may write it, and so replace %s below it", e.Mode.Perm(), name)
	fix := "choose a " + strings.TrimPrefix(name, "the ") + " whose parents only you or root may change, or chmod go-w " + e.Part
	if e.UID != e.EUID && e.UID != 0 {
		problem = fmt.Sprintf("belongs to %s, who may replace %s below it", userName(e.UID), name)
		if e.Mode&fs.ModeSymlink != 0 {
			problem = fmt.Sprintf("is a symbolic link that belongs to %s, who may point it elsewhere at any time", userName(e.UID))
		}
		fix = "choose a " + strings.TrimPrefix(name, "the ") + " whose parents only you or root may change"
	}
	return &UnprotectedError{Path: e.Part, Problem: problem + " (it is on the way to " + e.Path + ")", Fix: fix, Backup: p.backup}
}
