package replication

import (
	"errors"
	"io/fs"
	"os"
	"runtime/debug"

	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// ErrStateLost means the Raft store of a member that was made one (by bootstrap or
// a join: Config.MustHoldState) holds none of its state: no log entry and no
// snapshot, the raft/ directory or its raft.db removed or emptied. hashicorp/raft
// started such a member as a stranger to its own cluster: it waited for a leader
// that its empty configuration names nobody as ("no known peers, aborting
// election") until the start timed out, and had meanwhile made a fresh, empty
// raft.db that hid what had happened. A DamageError with Lost set matches it, and
// ErrDamaged.
var ErrStateLost = errors.New("this control node's Raft state is lost")

// checkHoldsState refuses, before anything in dir is created or opened, the store
// of a member that must hold state and cannot: dir missing, or raft.db missing or
// empty with no snapshot next to it (with snapshots, checkRaftDBPresent says what
// is lost). A raft.db that exists is read by checkStores, which refuses one that
// holds no entry while no snapshot exists.
func checkHoldsState(dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return &DamageError{File: dir, Lost: true, Problem: "is missing: this node's Raft log, its term and vote, and its snapshots are gone"}
	} else if err != nil {
		return err
	}
	if snaps, err := snapshotDirs(dir); err != nil || len(snaps) > 0 {
		return nil
	}
	path := raftDBPath(dir)
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &DamageError{File: path, Lost: true, Problem: "is missing, and no snapshot is there: this node's Raft log, its term and vote are gone"}
	case err != nil:
		return err
	case fi.Size() == 0:
		return &DamageError{File: path, Lost: true, Problem: "is empty (0 bytes), and no snapshot is there: this node's Raft log, its term and vote are gone"}
	}
	return nil
}

// checkNotEmpty refuses a store that holds no log entry while dir holds no
// snapshot: a raft.db bbolt made afresh, where the member's was removed. Reading a
// garbled raft.db may panic in bbolt: that is the damage checkStores names.
func checkNotEmpty(dir string, store *raftboltdb.BoltStore) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = readPanic(raftDBPath(dir), p)
		}
	}()
	if snaps, err := snapshotDirs(dir); err != nil || len(snaps) > 0 {
		return err
	}
	last, err := store.LastIndex()
	if err != nil {
		return &DamageError{File: raftDBPath(dir), Problem: "cannot be read", Err: err}
	}
	if last == 0 {
		return &DamageError{File: dir, Lost: true,
			Problem: "holds no Raft state (raft.db holds no log entry, and no snapshot is there): this node's log, its term and vote are gone"}
	}
	return nil
}
