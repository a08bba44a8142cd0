package apply

import (
	"errors"
	"fmt"
)

// ErrMeshDirectory: a declared path goes through a directory of the mesh's own
// programs, a control node's data directory or an agent's state directory, in
// the managed root. Nothing was written.
var ErrMeshDirectory = errors.New("apply: path through a directory of the mesh's own programs")

// meshLockFile and meshDirectoryFiles are how a directory of the mesh's own
// programs is known: the lock file both keep (host/dirlock's File) beside a
// control node's configuration (mesh.json) or an agent's identity (identity.json,
// or enrol-pending.json while it enrols). The applier imports neither program's
// packages, so the names are kept here (TestMeshDirectoryNamesAreThePrograms').
const meshLockFile = "lock"

var meshDirectoryFiles = []string{"mesh.json", "identity.json", "enrol-pending.json"}

// meshDirectory says which of meshDirectoryFiles d holds beside the lock file ("":
// d is no directory of the mesh's programs). A managed root that holds a control
// node's data directory (--root /srv with the data in /srv/meshctl), or another
// agent's state directory, let a declaration of one mesh overwrite that mesh's CA
// key or the agent's identity, and remove them (a review): the other mesh's
// operators decided what it trusts.
//
// A directory found clean is not looked at again while the agent runs (the
// RootGuard remembers it): a directory of the programs' is made only where a
// directory is empty or new, and one the agent manages files in is not empty.
func (r *run) meshDirectory(d *dirHandle) string {
	if d.meshChecked {
		return d.meshFile
	}
	d.meshChecked = true
	if r.guard.knownClean(d.name) {
		return ""
	}
	if _, regular := d.holds(meshLockFile); regular {
		for _, name := range meshDirectoryFiles {
			if exists, _ := d.holds(name); exists {
				d.meshFile = name
				return name
			}
		}
	}
	r.guard.setClean(d.name)
	return ""
}

// meshDirectoryRefusal is the refusal of p, whose way goes through dir, a
// directory of the mesh's programs holding file; for a path no longer declared it
// is left in place.
func meshDirectoryRefusal(p, dir, file string, declared bool) error {
	what := fmt.Sprintf("%q on its way is a directory of the mesh's own programs (it holds %s and %s: a control node's data directory or an agent's state directory)", dir, meshLockFile, file)
	if !declared {
		return &leftInPlace{reason: what + leftSaid}
	}
	return &PathError{Path: p, Err: ErrMeshDirectory, Reason: what + ", where declared files are never written: give the agent a managed root that holds none"}
}
