package datadir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"strconv"
)

// ErrUnprotected means the data directory, or a file serve reads from it, can be
// read or changed by another user than the one serve runs as. See
// *UnprotectedError.
var ErrUnprotected = errors.New("the data directory is not private to its control node")

// secretFiles hold private keys and credentials: no one but their owner may read
// them. The Raft directory holds the replicated state, declaration bodies included,
// and is judged the same way.
func secretFiles() []string {
	return []string{CAKeyFile, TLSKeyFile, SigningKeyFile, CurveKeyFile, AdminCredsFile, AccountKeyFile, JoinPendingFile, RaftDir}
}

// publicFiles are read and trusted (the CA a node pins, its own certificate and
// addresses): others may read them, no one else may change them.
func publicFiles() []string { return []string{ConfigFile, CACertFile, TLSCertFile, RemovedFile} }

// UnprotectedError is what CheckPrivate found wrong with Path: Problem, in words,
// and Fix, the command that mends it.
type UnprotectedError struct {
	Path    string
	Problem string
	Fix     string
	// Backup is set when the directory judged is a backup directory
	// (CheckBackupPlace), which the error names instead of the data directory.
	Backup bool
}

// Error says what is wrong and how to mend it, and nothing of what the caller does
// about it: serve refuses to start, a backup taken while serve runs is not written,
// a control token is not minted (each said "Nothing was started": a review).
func (e *UnprotectedError) Error() string {
	if e.Backup {
		return fmt.Sprintf("the backup directory is not private to its control node: %s %s. Each backup in it is a whole data directory, "+
			"the mesh's CA and signing keys and the operators' credentials among them, so only the user serve runs as may own it and write in it. "+
			"Check that the backups are the ones this control node wrote (anyone who could write there may have replaced them), then: %s",
			e.Path, e.Problem, e.Fix)
	}
	return fmt.Sprintf("%v: %s %s. The data directory holds the mesh's CA and signing keys and the operators' credentials, "+
		"so only the user serve runs as may own it, write in it and read its keys (as OpenSSH's StrictModes asks of ~/.ssh; "+
		"a copy restored without its modes looks like this). Check that the files are the ones meshctl wrote "+
		"(anyone who could write there may have replaced them), then: %s",
		ErrUnprotected, e.Path, e.Problem, e.Fix)
}

// Is makes errors.Is(err, ErrUnprotected) hold.
func (e *UnprotectedError) Is(target error) bool { return target == ErrUnprotected }

// CheckPrivate refuses a data directory another user could read the keys of, or
// change: the directory must belong to the user running this program and not be
// writable by group or others; each file serve reads must be that user's, not a
// symbolic link, and not writable by group or others; the secrets among them (and
// the Raft directory) not readable by them either; and the directory must be in a
// place no other user could change (CheckPlace). Files that do not exist are
// skipped. Where files have no owner (not Unix), only the modes are judged.
func (d Dir) CheckPrivate() error {
	if err := d.CheckPlace(); err != nil {
		return err
	}
	euid := os.Geteuid()
	fi, err := os.Stat(string(d))
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return d.notADirectory(fi)
	}
	if err := judge(string(d), fi, euid, 0o022, true); err != nil {
		return err
	}
	for _, names := range []struct {
		list []string
		mask fs.FileMode
	}{{secretFiles(), 0o077}, {publicFiles(), 0o022}} {
		for _, name := range names.list {
			fi, err := os.Lstat(d.Path(name))
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return err
			}
			if err := judge(d.Path(name), fi, euid, names.mask, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// judge checks one entry: its owner against euid, its mode against mask (the bits
// no one but the owner may have).
func judge(path string, fi fs.FileInfo, euid int, mask fs.FileMode, isDataDir bool) error {
	if fi.Mode()&fs.ModeSymlink != 0 {
		return &UnprotectedError{Path: path, Problem: "is a symbolic link (never followed)", Fix: "put the file itself there, as meshctl wrote it"}
	}
	if uid, ok := FileOwner(fi); ok && uid != euid {
		fix := fmt.Sprintf("chown %d %s", euid, path)
		if isDataDir || fi.IsDir() {
			fix = fmt.Sprintf("chown -R %d %s", euid, path)
		}
		return &UnprotectedError{Path: path, Problem: fmt.Sprintf("belongs to %s, and meshctl runs as %s", userName(uid), userName(euid)), Fix: fix}
	}
	if bad := fi.Mode().Perm() & mask; bad != 0 {
		problem := fmt.Sprintf("has mode %#o: group or others may write it", fi.Mode().Perm())
		if bad&0o044 != 0 && mask&0o044 != 0 {
			problem = fmt.Sprintf("has mode %#o: group or others may read it", fi.Mode().Perm())
		}
		return &UnprotectedError{Path: path, Problem: problem, Fix: fmt.Sprintf("chmod %s %s", fixedMode(fi, mask), path)}
	}
	return nil
}

// fixedMode is the mode with the bits of mask taken away, in octal.
func fixedMode(fi fs.FileInfo, mask fs.FileMode) string {
	return strconv.FormatUint(uint64(fi.Mode().Perm()&^mask), 8)
}

// userName names uid for a person: its login name, if it has one, and the number.
func userName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return fmt.Sprintf("%s (uid %d)", u.Username, uid)
	}
	return fmt.Sprintf("uid %d", uid)
}

// CheckKeysPrivate refuses the named key files of the directory when group or
// others may read them, or when one is a symbolic link, whoever runs the command
// (an operator may run meshctl as another user than serve's). Minting a control
// token reads the CA key and the operator account key with it: a copy of either
// mints control nodes and operators for good.
func (d Dir) CheckKeysPrivate(names ...string) error {
	for _, name := range names {
		fi, err := os.Lstat(d.Path(name))
		if err != nil {
			return err
		}
		owner, ok := FileOwner(fi)
		if !ok {
			owner = os.Geteuid()
		}
		if err := judge(d.Path(name), fi, owner, 0o077, false); err != nil {
			return err
		}
	}
	return nil
}
