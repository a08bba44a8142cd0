package replication

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc64"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"

	"mesh/controlplane/datadir"
)

// Inspection is what a member's Raft stores hold, as Inspect read them.
type Inspection struct {
	// FirstIndex and LastIndex bound the log in raft.db (both 0: it holds no
	// entry); LastTerm is the term of the last entry, or of the snapshot when the
	// log holds none after it.
	FirstIndex, LastIndex, LastTerm uint64
	// CurrentTerm is the term the member last recorded, with its vote.
	CurrentTerm uint64
	// Snapshot is the snapshot Raft restores at start: the newest that is whole
	// (nil: there is none).
	Snapshot *SnapshotInfo
	// PassedOver is a newer snapshot that is not whole, which Raft passes over since
	// the log holds what it held (serve warns of it).
	PassedOver *DamageError
	// State is a state machine of the kind Inspect was given, holding the snapshot
	// and every command entry logged after it, in order: the state the member
	// serves once its leader says those entries committed (a lone voter's are).
	State raft.FSM
	// Applied is the index of the last entry taken into State (the snapshot's when
	// the log holds none after it), and Commands how many command entries were
	// applied after the snapshot.
	Applied  uint64
	Commands int
	// Servers are the members of the newest Raft configuration the stores hold
	// (in the log after the snapshot, or the snapshot's).
	Servers []raft.Server
	// PeersFile says the manual recovery file (PeersFile) is there, and usable: the
	// member recovers its configuration from it at start.
	PeersFile bool
}

// SnapshotInfo names a snapshot of the Raft store.
type SnapshotInfo struct {
	ID          string
	Index, Term uint64
}

// Inspect reads the Raft stores of member id in dir as Open would start from them,
// and checks them as it does (Config.MustHoldState included), changing nothing:
// raft.db is opened read-only and the snapshots read as files, so it may be run on
// a copy of a data directory, or on a directory whose node is stopped. It restores
// the newest whole snapshot into emptyFSM() and applies every command entry after
// it, in memory. The peers file is checked as member id's, whose own Raft address is
// raftAddr (not when id is "": the member is not known; nor its address when
// raftAddr is ""). While a process has raft.db open for writing it waits up to wait,
// then returns ErrStoreInUse; a process that opens raft.db for writing meanwhile
// waits until Inspect is done (bbolt's lock on the file).
func Inspect(dir, id, raftAddr string, emptyFSM func() raft.FSM, wait time.Duration) (*Inspection, error) {
	if err := checkHoldsState(dir); err != nil {
		return nil, err
	}
	if err := checkRaftDBPresent(dir); err != nil {
		return nil, err
	}
	store, err := openBoltWith(dir, boltAccess{readOnly: true, wait: wait})
	if err != nil {
		return nil, err
	}
	defer store.Close()
	if err := checkNotEmpty(dir, store); err != nil {
		return nil, err
	}
	found, err := checkStores(dir, store, func(id string) (io.ReadCloser, error) {
		_, rc, err := openSnapshot(dir, id)
		return rc, err
	})
	if err != nil {
		return nil, err
	}
	in := &Inspection{FirstIndex: found.first, LastIndex: found.last, PassedOver: found.passedOver}
	if in.CurrentTerm, err = store.GetUint64(stableCurrentTerm); err != nil {
		return nil, &DamageError{File: raftDBPath(dir), Problem: "has lost this node's Raft term and vote", Err: err}
	}
	if id != "" {
		if _, in.PeersFile, err = readPeersFile(dir, id, raftAddr); err != nil {
			return nil, err
		}
	}
	fsm := emptyFSM()
	if s := found.restored; s != nil {
		meta, rc, err := openSnapshot(dir, s.name)
		if err != nil {
			return nil, &DamageError{File: filepath.Join(dir, "snapshots", s.name), Problem: "cannot be opened", Err: err}
		}
		if err := fsm.Restore(rc); err != nil {
			return nil, &DamageError{File: filepath.Join(dir, "snapshots", s.name, "state.bin"), Problem: "cannot be read as the state it should hold", Err: err}
		}
		in.Snapshot = &SnapshotInfo{ID: meta.ID, Index: meta.Index, Term: meta.Term}
		in.Applied, in.LastTerm, in.Servers = meta.Index, meta.Term, meta.Configuration.Servers
	}
	if err := replay(dir, store, fsm, in); err != nil {
		return nil, err
	}
	in.State = fsm
	return in, nil
}

// replay applies the entries of the log after in's snapshot to fsm, as Raft does
// once they commit, and takes the newest configuration among them, as Raft does at
// start. Every one of them was read already (checkStores).
func replay(dir string, store raft.LogStore, fsm raft.FSM, in *Inspection) (err error) {
	var at uint64
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("apply entry %d of %s to the state: %v", at, raftDBPath(dir), p)
		}
	}()
	from := in.FirstIndex
	if in.Snapshot != nil {
		from = max(from, in.Snapshot.Index+1)
	}
	for i := from; i <= in.LastIndex && i > 0; i++ {
		at = i
		var l raft.Log
		if err := store.GetLog(i, &l); err != nil {
			return &DamageError{File: raftDBPath(dir), Problem: fmt.Sprintf("cannot give entry %d", i), Err: err}
		}
		in.LastTerm = l.Term
		switch l.Type {
		case raft.LogCommand:
			if !json.Valid(l.Data) {
				// Every leader writes a command as JSON: one whose bytes are not
				// is garbled on this disk, and the state machine would skip it
				// here alone, this node's state then differing from the others'
				// (a walkthrough: a revocation so lost passed as "ok").
				return &DamageError{File: raftDBPath(dir), Problem: fmt.Sprintf("holds at entry %d a command whose bytes are not a command (not JSON): garbled on this disk", i)}
			}
			fsm.Apply(&l)
			in.Commands++
		case raft.LogConfiguration:
			conf, err := decodeConfiguration(l.Data)
			if err != nil {
				return &DamageError{File: raftDBPath(dir), Problem: fmt.Sprintf("holds a Raft configuration at entry %d that cannot be read", i), Err: err}
			}
			in.Servers = conf.Servers
		}
		in.Applied = i
	}
	return nil
}

// decodeConfiguration is raft.DecodeConfiguration, which panics on what it cannot
// decode, returning an error instead.
func decodeConfiguration(data []byte) (conf raft.Configuration, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%v", p)
		}
	}()
	return raft.DecodeConfiguration(data), nil
}

// openSnapshot opens snapshot id in dir (raft/) for reading as hashicorp/raft's file
// snapshot store does (FileSnapshotStore.Open: meta.json, then state.bin, checked
// against the CRC-64 meta.json holds), without that store, whose opening makes
// snapshots/ and writes a file in it to see that it can.
func openSnapshot(dir, id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	snap := filepath.Join(dir, "snapshots", id)
	metaPath := filepath.Join(snap, "meta.json")
	if err := datadir.CheckRegular(metaPath); err != nil {
		return nil, nil, err
	}
	data, err := os.ReadFile(metaPath)
	if err != nil {
		return nil, nil, err
	}
	meta, err := decodeSnapshotMeta(data)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", metaPath, err)
	}
	statePath := filepath.Join(snap, "state.bin")
	// A FIFO there would hold the reader for good.
	if err := datadir.CheckRegular(statePath); err != nil {
		return nil, nil, err
	}
	f, err := os.Open(statePath)
	if err != nil {
		return nil, nil, err
	}
	sum := crc64.New(crc64.MakeTable(crc64.ECMA))
	if _, err := io.Copy(sum, f); err != nil {
		f.Close()
		return nil, nil, err
	}
	if !bytes.Equal(meta.CRC, sum.Sum(nil)) {
		f.Close()
		return nil, nil, errors.New("CRC mismatch")
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, nil, err
	}
	return &meta.SnapshotMeta, bufferedFile{Reader: bufio.NewReader(f), f: f}, nil
}

// bufferedFile reads a file through a buffer and closes the file.
type bufferedFile struct {
	*bufio.Reader
	f *os.File
}

func (b bufferedFile) Close() error { return b.f.Close() }
