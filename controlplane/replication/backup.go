package replication

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"mesh/controlplane/internal/ctxio"
	"mesh/host/atomicfile"
)

// A backup of a member's Raft store is taken through hashicorp/raft, never by
// copying raft.db: a file copy of a bbolt database being written holds pages of
// several moments (decision 0025's amendment). Raft's user snapshot gives the
// state machine's state as of one index, consistent; the backup's store is that
// snapshot and a raft.db of its own holding no log entry and the member's term.
// hashicorp/raft starts from such a store as from any other: NewRaft restores the
// newest snapshot, takes its configuration, and the log continues after it.

// BackupStore is what BackUp wrote.
type BackupStore struct {
	// Index and Term are the snapshot's: the state is the state machine's as of
	// entry Index.
	Index, Term uint64
	// CurrentTerm is the term recorded in the backup's raft.db, the member's at
	// the time: never below Term.
	CurrentTerm uint64
	// Taken says the snapshot was taken for this backup; false: nothing was
	// applied since the newest snapshot the member held, which was copied.
	Taken bool
	// Size is the bytes written: the snapshot and raft.db.
	Size int64
}

// backupOpenTries bounds the attempts to open the member's newest snapshot when
// Raft's retention removes it between the listing and the opening.
const backupOpenTries = 5

// BackUp writes a consistent copy of this member's Raft store into dir, which it
// creates (mode 0700) and which must not exist: a snapshot of the state taken
// through Raft (or, when nothing was applied since the newest one, that one), in
// snapshots/ as hashicorp/raft's file store writes it, and a raft.db holding no
// log entry, its current term this member's (so that a member started on it never
// writes an entry under a term below its snapshot's) and a vote for itself in that
// term (so that it grants no other candidate a vote in a term this member may have
// voted in already). Taking the snapshot costs what Raft's own snapshots cost (the
// state copied under its read lock, then encoded and written to this member's
// store beside Raft's apply); the
// copy into dir is made here, on the caller's goroutine, which ctx may stop.
// Everything written is flushed to disk. On an error, dir may hold part of the
// copy: the caller removes it.
func (n *Node) BackUp(ctx context.Context, dir string) (BackupStore, error) {
	meta, rc, taken, err := n.openBackupSnapshot()
	if err != nil {
		return BackupStore{}, err
	}
	defer rc.Close()
	out := BackupStore{Index: meta.Index, Term: meta.Term, Taken: taken}
	// Read after the snapshot was taken: terms only grow, so this one is at
	// least the snapshot's.
	out.CurrentTerm = max(n.raft.CurrentTerm(), meta.Term)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return out, err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, snapshotsRetained, hclog.NewNullLogger())
	if err != nil {
		return out, fmt.Errorf("open the backup's snapshot store: %w", err)
	}
	sink, err := snaps.Create(meta.Version, meta.Index, meta.Term, meta.Configuration, meta.ConfigurationIndex, n.trans)
	if err != nil {
		return out, fmt.Errorf("create the backup's snapshot: %w", err)
	}
	written, err := io.Copy(sink, ctxio.Reader(ctx, rc))
	if err != nil {
		_ = sink.Cancel()
		return out, fmt.Errorf("write the backup's snapshot: %w", err)
	}
	if err := sink.Close(); err != nil {
		return out, fmt.Errorf("write the backup's snapshot: %w", err)
	}
	out.Size += written
	if err := writeBackupTerm(dir, out.CurrentTerm, n.trans.EncodePeer(n.id, n.trans.LocalAddr())); err != nil {
		return out, err
	}
	for _, name := range []string{raftDBPath(dir), filepath.Join(dir, "snapshots", sink.ID(), "meta.json")} {
		if fi, err := os.Stat(name); err == nil {
			out.Size += fi.Size()
		}
	}
	// raft.db's and snapshots/'s names in dir; the snapshot store flushed its own.
	return out, atomicfile.SyncDir(dir)
}

// openBackupSnapshot takes a snapshot through Raft and opens it. When Raft finds
// nothing new to snapshot (its state machine applied nothing since this process
// started it from the newest snapshot, whose state is then the state), that one is
// opened instead (taken false), again if Raft's retention removed it meanwhile.
func (n *Node) openBackupSnapshot() (*raft.SnapshotMeta, io.ReadCloser, bool, error) {
	f := n.raft.Snapshot()
	err := f.Error()
	if err == nil {
		meta, rc, err := f.Open()
		if err != nil {
			return nil, nil, false, fmt.Errorf("open the snapshot taken for the backup: %w", err)
		}
		return meta, rc, true, nil
	}
	if !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		return nil, nil, false, fmt.Errorf("take a Raft snapshot for the backup: %w", err)
	}
	var last error
	for range backupOpenTries {
		metas, err := n.snaps.List()
		if err != nil {
			return nil, nil, false, fmt.Errorf("list this node's Raft snapshots: %w", err)
		}
		if len(metas) == 0 {
			return nil, nil, false, errors.New("raft found nothing new to snapshot, and this node holds no snapshot")
		}
		meta, rc, err := n.snaps.Open(metas[0].ID)
		if err == nil {
			return meta, rc, false, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, nil, false, fmt.Errorf("open this node's Raft snapshot %s: %w", metas[0].ID, err)
		}
		last = err // removed by Raft's retention since the listing: list again
	}
	return nil, nil, false, fmt.Errorf("open this node's newest Raft snapshot: removed each time before it could be opened: %w", last)
}

// writeBackupTerm makes dir's raft.db, as serve opens it, holding no log entry:
// the current term, and a vote in it for the candidate whose encoded address is
// self, as Raft records a vote for itself.
func writeBackupTerm(dir string, term uint64, self []byte) error {
	store, err := raftboltdb.New(raftboltdb.Options{Path: raftDBPath(dir)})
	if err != nil {
		return fmt.Errorf("create the backup's raft.db: %w", err)
	}
	for _, set := range []func() error{
		func() error { return store.SetUint64(stableCurrentTerm, term) },
		func() error { return store.SetUint64(stableLastVoteTerm, term) },
		func() error { return store.Set(stableLastVoteCand, self) },
	} {
		if err := set(); err != nil {
			store.Close()
			return fmt.Errorf("write the backup's raft.db: %w", err)
		}
	}
	// Each Set committed, and bbolt flushed it (serve's options: no NoSync).
	if err := store.Close(); err != nil {
		return fmt.Errorf("close the backup's raft.db: %w", err)
	}
	return nil
}

// Stable-store keys of hashicorp/raft beside stableCurrentTerm: the term of the
// last vote cast and the candidate it went to.
var (
	stableLastVoteTerm = []byte("LastVoteTerm")
	stableLastVoteCand = []byte("LastVoteCand")
)
