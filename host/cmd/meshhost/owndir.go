package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"mesh/host/agent"
	"mesh/host/dirlock"
	"mesh/host/identity"
	"mesh/host/state"
)

// errForeignFiles marks a state directory that holds files, none of them meshhost's:
// most likely a path given by mistake (/etc, a home directory), which an enrolment
// would fill with its identity, state and lock.
var errForeignFiles = errors.New("not a state directory")

// ownFiles are the names meshhost keeps in a state directory; its temporary files
// (".NAME.tmp-…", atomicfile's) are told by their form.
var ownFiles = []string{
	identity.FileName, identity.PendingFileName, state.FileName, state.LegacyFileName,
	agent.KeptFileName, agent.HookGroupName, agent.SocketName, dirlock.File, revokedFile,
}

// controlNodeFiles are names only a control node's data directory holds (meshctl's
// datadir, which meshhost does not import): its configuration and its Raft store.
var controlNodeFiles = []string{"mesh.json", "raft"}

// checkOwnDirectory refuses an existing, non-empty state directory that holds none
// of meshhost's files. One that holds some is an earlier enrolment's (begun, or of a
// node since revoked); `lost+found` is a file system of its own's; hidden files (a
// `.keep` a configuration tool leaves) and the token file enrolling from there are
// left out: /etc and a home directory always hold more.
func checkOwnDirectory(dir, tokenFile string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	// A control node's data directory holds a lock file of the same name as
	// meshhost's, which counted as meshhost's own: an enrolment there wrote the
	// host's identity beside the CA key, and serve and the agent then locked each
	// other out for good (a review).
	for _, e := range entries {
		if slices.Contains(controlNodeFiles, e.Name()) {
			return fmt.Errorf("--state %s is a control node's data directory (it holds %s): %w, and nothing was written there; give the agent a directory of its own (the packaged one is /var/lib/meshhost)",
				dir, e.Name(), errForeignFiles)
		}
	}
	var others []string
	for _, e := range entries {
		name := e.Name()
		if slices.Contains(ownFiles, name) || strings.HasPrefix(name, ".") && strings.Contains(name, ".tmp-") {
			return nil
		}
		if name == "lost+found" || strings.HasPrefix(name, ".") || sameFile(filepath.Join(dir, name), tokenFile) {
			continue
		}
		others = append(others, name)
	}
	if len(others) == 0 {
		return nil
	}
	return fmt.Errorf("--state %s holds %s and nothing of meshhost's: %w, and nothing was written there; give --state an empty or new directory (the packaged one is /var/lib/meshhost), or move those files out",
		dir, listShort(others, 3), errForeignFiles)
}

// sameFile reports whether a and b (b may be "" or "-") name the same file.
func sameFile(a, b string) bool {
	if b == "" || b == "-" {
		return false
	}
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}

// refuseControlDir refuses a control node's data directory given as --state to
// run and status (enrol refuses it in checkOwnDirectory): they said "not enrolled,
// enrol into it", which enrol then refused, and run wrote its lock record over
// meshctl's (a walkthrough). Nothing is written.
func refuseControlDir(dir string) error {
	for _, name := range controlNodeFiles {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			return fmt.Errorf("--state %s is a control node's data directory (it holds %s): %w; give the agent's own state directory (the packaged one is /var/lib/meshhost)",
				dir, name, errForeignFiles)
		}
	}
	return nil
}
