package replication

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"mesh/controlplane/datadir"
	"mesh/host/readfile"
)

// maxSnapshotMeta bounds the meta.json of a snapshot read to judge it: raft writes
// a few hundred bytes and the configuration (a few per control node).
const maxSnapshotMeta = 1 << 20

// A power loss on a disk that loses or garbles what it was told to keep, or a hand
// that truncated a file, leaves a control node's Raft store damaged. hashicorp/raft
// and bbolt meet that with a Go panic (bbolt's page assertions, raft's "log not
// found" when the log does not continue the snapshot it restored), which a unit
// restarts up to its start limit, or, worse, with nothing at all: an emptied
// raft.db next to its snapshots started a node that had lost its log and its vote.
// The stores are checked before Raft opens them, and a damage found stops the node
// with ErrDamaged, naming the file.

// ErrDamaged means this control node's Raft store (raft.db or a snapshot) is
// truncated or corrupt: serving from it could lose committed changes or, with
// other voters, split the state. A DamageError says which file and what.
var ErrDamaged = errors.New("this control node's Raft store is damaged")

// DamageError is the damage found in one file of the Raft store.
type DamageError struct {
	// File is the damaged file's path.
	File string
	// Problem says what is wrong with it.
	Problem string
	// Err is the underlying error, if any.
	Err error
	// Lost: the store holds none of the member's state (ErrStateLost).
	Lost bool
}

func (e *DamageError) Error() string {
	what := e.Problem
	if e.Err != nil {
		what += ": " + e.Err.Error()
	}
	head := ErrDamaged
	if e.Lost {
		head = ErrStateLost
	}
	return fmt.Sprintf("%v: %s %s. Serving from it could lose committed changes or split the mesh's state, so this node will not start: "+
		"if other control nodes run, remove this node from the mesh (`meshctl control remove`) and `meshctl join` it again with a new control token on a fresh data directory "+
		"(docs/operations.md, \"A damaged Raft store\"; never restore its copy beside them); "+
		"a single control node: restore its data directory from a backup (one serve --backup-dir took, or a copy taken while serve was stopped; docs/operations.md, Backing up)",
		head, e.File, what)
}

// Is makes errors.Is(err, ErrDamaged) hold, and errors.Is(err, ErrStateLost) for a
// store that lost all of it.
func (e *DamageError) Is(target error) bool {
	return target == ErrDamaged || e.Lost && target == ErrStateLost
}

// Unwrap returns the underlying error.
func (e *DamageError) Unwrap() error { return e.Err }

// stableCurrentTerm is the stable-store key under which hashicorp/raft keeps the
// current term: any member that ever started has it.
var stableCurrentTerm = []byte("CurrentTerm")

// raftDBPath is the log and stable store's file in dir.
func raftDBPath(dir string) string { return filepath.Join(dir, "raft.db") }

// checkRaftDBPresent refuses a raft.db that is missing or empty while snapshots
// say the member held state: bbolt would make a new, empty one, and the member
// would start without the entries after its snapshot and without its vote.
func checkRaftDBPresent(dir string) error {
	path := raftDBPath(dir)
	fi, err := os.Stat(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err == nil && fi.Size() > 0 {
		return nil
	}
	snaps, serr := snapshotDirs(dir)
	if serr != nil || len(snaps) == 0 {
		return nil // a member that never started, or one bootstrap is making
	}
	problem := "is missing"
	if err == nil {
		problem = "is empty (0 bytes)"
	}
	return &DamageError{File: path, Problem: problem + ", though " + filepath.Join(dir, "snapshots") +
		" holds snapshots: the Raft log after them and this node's vote are lost"}
}

// openBolt opens raft.db, turning bbolt's refusals of a file that is no whole
// database, and its panics on one whose pages are garbled, into a DamageError.
// Errors of the file system (permissions, a read-only or full disk) are returned
// as they are.
func openBolt(dir string) (store *raftboltdb.BoltStore, err error) {
	return openBoltWith(dir, boltAccess{wait: writerLockWait})
}

// writerLockWait bounds how long serve and bootstrap wait for another process's
// lock on raft.db: the data directory's own lock keeps a second serve out before it
// gets here, unless that lock file was replaced or removed (a review: a declaration
// of another mesh did), and a second serve then waited on raft.db for good, saying
// nothing, where it is refused (exit 8). A check reading a copy holds it far less.
const writerLockWait = 30 * time.Second

// boltAccess is how raft.db is opened: for writing (serve, bootstrap), waiting for
// any other process's lock on the file to go, or read-only (Inspect), waiting at
// most wait for a writer's lock (bbolt's flock: shared for readers, exclusive for a
// writer) and then refused with ErrStoreInUse.
type boltAccess struct {
	readOnly bool
	wait     time.Duration
}

// ErrStoreInUse means another process has raft.db open for writing (a control node
// serving from it): Inspect, which reads, did not wait for it to stop. It matches
// datadir.ErrInUse.
var ErrStoreInUse = fmt.Errorf("%w: the Raft store is open in another process", datadir.ErrInUse)

// inUse turns bbolt's timeout waiting for the file's lock into ErrStoreInUse, for a
// reader (readOnly) or a writer.
func inUse(path string, err error, readOnly bool) error {
	if errors.Is(err, berrors.ErrTimeout) && !readOnly {
		return fmt.Errorf("%w: %s is held by another process (a meshctl serve running on this data directory, whose lock file was replaced or removed?): "+
			"stop it, then start this again (`fuser -v %s` names it)", ErrStoreInUse, path, path)
	}
	if errors.Is(err, berrors.ErrTimeout) {
		return fmt.Errorf("%w: %s is held by another process (a meshctl serve running on this data directory?); "+
			"check a copy: a backup serve took (--backup-dir), or one taken while serve was stopped, or stop serve first (docs/operations.md, \"Backing up\")", ErrStoreInUse, path)
	}
	return err
}

// openBoltWith is openBolt, raft.db opened as access says.
func openBoltWith(dir string, access boltAccess) (store *raftboltdb.BoltStore, err error) {
	path := raftDBPath(dir)
	// bbolt maps the file and reads its pages in place: a page the file was cut
	// before is a fault (SIGBUS), fatal unless it is made a panic.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			// bbolt may hold the file's lock: the process is about to stop. A
			// runtime error (a nil pointer, a fault on a page past the end) says
			// nothing more to a person than this, and reads like a crash.
			var cause error
			if _, ok := p.(runtime.Error); !ok {
				cause = fmt.Errorf("%v", p)
			}
			store, err = nil, &DamageError{File: path, Problem: "is corrupt or cut short: its pages cannot be read", Err: cause}
		}
	}()
	if err := datadir.CheckRegular(path); err != nil {
		return nil, err
	}
	if err := checkBoltPages(path, access.wait, access.readOnly); err != nil {
		return nil, err
	}
	opts := raftboltdb.Options{Path: path}
	if access.readOnly {
		opts.BoltOptions = &bbolt.Options{ReadOnly: true, Timeout: access.wait}
	} else if access.wait > 0 {
		o := *bbolt.DefaultOptions
		o.Timeout = access.wait
		opts.BoltOptions = &o
	}
	store, err = raftboltdb.New(opts)
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, inUse(path, err, access.readOnly)
	}
	if err != nil {
		var pe *fs.PathError
		var errno syscall.Errno
		if errors.As(err, &pe) || errors.As(err, &errno) {
			return nil, fmt.Errorf("open raft log %s: %w", path, err)
		}
		return nil, &DamageError{File: path, Problem: "is not a whole Raft log", Err: err}
	}
	return store, nil
}

// checkBoltPages runs bbolt's consistency check on raft.db, opened read-only,
// before raftboltdb opens it for writing. A file copied page by page while serve
// wrote it (cp, tar or rsync of a running node) can hold pages of two moments: a
// page both in use and on the freelist reads well, and bbolt panics ("page N
// already freed") on the first write that frees it, once the node leads. A file
// that is missing or empty is left to the callers: bbolt makes a new one. wait
// bounds how long it waits for a writer's lock on the file (zero: as long as it
// takes).
func checkBoltPages(path string, wait time.Duration, readOnly bool) (err error) {
	if fi, serr := os.Stat(path); serr != nil || fi.Size() == 0 {
		return nil
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true)) // as in openBolt
	defer func() {
		if p := recover(); p != nil {
			// As in openBolt: a panic in bbolt.Open leaves the file mapped and
			// its lock held; the process is about to stop.
			var cause error
			if _, ok := p.(runtime.Error); !ok {
				cause = fmt.Errorf("%v", p)
			}
			err = &DamageError{File: path, Problem: "is corrupt or cut short: its pages cannot be read", Err: cause}
		}
	}()
	// PreLoadFreelist: the freelist is read here, where a garbled one's panic is
	// recovered, not in Check's goroutine.
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, PreLoadFreelist: true, Timeout: wait})
	if errors.Is(err, berrors.ErrTimeout) {
		return inUse(path, err, readOnly)
	}
	if err != nil {
		var pe *fs.PathError
		var errno syscall.Errno
		if errors.As(err, &pe) || errors.As(err, &errno) {
			return fmt.Errorf("open raft log %s: %w", path, err)
		}
		return &DamageError{File: path, Problem: "is not a whole Raft log", Err: err}
	}
	defer db.Close()
	return db.View(func(tx *bbolt.Tx) error {
		// Every page in use is read here first: Check reads them in a goroutine
		// of its own, where a garbled page's panic or fault could not be
		// recovered and would stop the process with a Go trace.
		if err := tx.ForEach(func(_ []byte, b *bbolt.Bucket) error {
			readBucket(b)
			return nil
		}); err != nil {
			return &DamageError{File: path, Problem: "cannot be read", Err: err}
		}
		var (
			firstProblem error
			problems     int
		)
		for cerr := range tx.Check() { // drained: Check's goroutine stops when it is
			if firstProblem == nil {
				firstProblem = cerr
			}
			problems++
		}
		if problems > 0 {
			return &DamageError{File: path, Problem: fmt.Sprintf("fails bbolt's consistency check with %d problem(s), the first", problems), Err: firstProblem}
		}
		return nil
	})
}

// readBucket reads every key of b and of the buckets in it.
func readBucket(b *bbolt.Bucket) {
	c := b.Cursor()
	var prev []byte
	for k, v := c.First(); k != nil; k, v = c.Next() {
		_ = bytes.Compare(prev, k) // reads the key's bytes, as Check's key-order test does
		prev = k
		if v == nil {
			if child := b.Bucket(k); child != nil {
				readBucket(child)
			}
		}
	}
}

// snapshotDir is one snapshot's directory as the check sees it.
type snapshotDir struct {
	name         string
	term, index  uint64
	msec         uint64
	metaReadable bool
}

// snapshotDirs lists dir's snapshots, newest first, as hashicorp/raft orders them
// (term, then index, then name), those whose meta.json cannot be read included
// (raft skips those silently), placed by their name (term-index-msec).
func snapshotDirs(dir string) ([]snapshotDir, error) {
	entries, err := os.ReadDir(filepath.Join(dir, "snapshots"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []snapshotDir
	for _, e := range entries {
		if !e.IsDir() || strings.HasSuffix(e.Name(), ".tmp") {
			continue // a snapshot being written when the node stopped: raft ignores it
		}
		s := snapshotDir{name: e.Name()}
		if parts := strings.Split(e.Name(), "-"); len(parts) == 3 {
			s.term, _ = strconv.ParseUint(parts[0], 10, 64)
			s.index, _ = strconv.ParseUint(parts[1], 10, 64)
			s.msec, _ = strconv.ParseUint(parts[2], 10, 64)
		}
		// Without waiting on a named pipe at its name (a review's run: it held
		// `meshctl check`, and serve, for good): a meta.json that is no regular
		// file is unreadable, and the snapshot passed over as such.
		data, err := readfile.Regular(filepath.Join(dir, "snapshots", e.Name(), "meta.json"), maxSnapshotMeta)
		if meta, merr := decodeSnapshotMeta(data); err == nil && merr == nil && meta.ID == e.Name() {
			s.metaReadable, s.term, s.index = true, meta.Term, meta.Index
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.term != b.term {
			return a.term > b.term
		}
		if a.index != b.index {
			return a.index > b.index
		}
		return a.name > b.name
	})
	return out, nil
}

// snapshotMeta is a snapshot's meta.json, as hashicorp/raft's file snapshot store
// keeps it (its fileSnapshotMeta).
type snapshotMeta struct {
	raft.SnapshotMeta
	CRC []byte
}

// decodeSnapshotMeta reads a snapshot's meta.json as hashicorp/raft's file snapshot
// store does (FileSnapshotStore.readMeta, then getSnapshots's version check): the
// first JSON value, whatever follows it, of a snapshot version raft restores. Read
// with json.Unmarshal and no version check, a meta.json with bytes after its value
// was damage to the check and a snapshot to raft, which restored it, and one of a
// version raft skips was the snapshot the check judged raft would restore
// (FuzzSnapshotDirs).
func decodeSnapshotMeta(data []byte) (snapshotMeta, error) {
	var meta snapshotMeta
	if err := json.NewDecoder(bytes.NewReader(data)).Decode(&meta); err != nil {
		return meta, err
	}
	if meta.Version < raft.SnapshotVersionMin || meta.Version > raft.SnapshotVersionMax {
		return meta, fmt.Errorf("snapshot version %d, not one raft restores (%d to %d)", meta.Version, raft.SnapshotVersionMin, raft.SnapshotVersionMax)
	}
	return meta, nil
}

// checkStores reads what Raft will read at start: the newest snapshot that is whole
// (its checksum), every entry of the log after it, and the current term, and checks that
// the log continues from that snapshot. A newer snapshot that is not whole is
// passed over, as Raft does, when the log covers what it held (passedOver says
// which); it is damage when the log does not. Panics of bbolt on garbled pages
// come back as a DamageError. open opens a snapshot by its id as raft's file
// snapshot store does, its checksum checked.
func checkStores(dir string, store *raftboltdb.BoltStore, open func(id string) (io.ReadCloser, error)) (found storesFound, err error) {
	path := raftDBPath(dir)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true)) // as in openBolt
	defer func() {
		if p := recover(); p != nil {
			found, err = storesFound{}, readPanic(path, p)
		}
	}()
	snaps, err := snapshotDirs(dir)
	if err != nil {
		return found, fmt.Errorf("list raft snapshots: %w", err)
	}
	var (
		restored    uint64 // the index of the snapshot Raft will restore
		passed      *DamageError
		passedIndex uint64 // the index the passed-over snapshot's name gives
	)
	for _, s := range snaps {
		file := filepath.Join(dir, "snapshots", s.name, "state.bin")
		if !s.metaReadable {
			if passed == nil {
				passed = &DamageError{File: filepath.Join(dir, "snapshots", s.name, "meta.json"), Problem: "cannot be read"}
				passedIndex = s.index
			}
			continue
		}
		rc, oerr := open(s.name)
		if oerr == nil {
			_, oerr = io.Copy(io.Discard, rc)
			rc.Close()
		}
		if oerr != nil {
			if passed == nil {
				passed = &DamageError{File: file, Problem: fmt.Sprintf("is not whole (%v)", oerr)}
				passedIndex = s.index
			}
			continue
		}
		restored = s.index
		found.restored = &s
		break
	}
	if passed != nil && restored == 0 && slices.ContainsFunc(snaps, func(s snapshotDir) bool { return s.metaReadable }) {
		// Raft refuses to start when no snapshot it lists opens.
		return storesFound{}, passed
	}

	first, err := store.FirstIndex()
	if err != nil {
		return storesFound{}, &DamageError{File: path, Problem: "cannot be read", Err: err}
	}
	last, err := store.LastIndex()
	if err != nil {
		return storesFound{}, &DamageError{File: path, Problem: "cannot be read", Err: err}
	}
	if last > restored && first > restored+1 {
		if passed != nil {
			passed.Problem += fmt.Sprintf(", and the Raft log starts at entry %d, after the newest whole snapshot (entry %d): the entries in between are lost", first, restored)
			return storesFound{}, passed
		}
		return storesFound{}, &DamageError{File: path, Problem: fmt.Sprintf("starts at entry %d, but no snapshot holds the entries before it", first)}
	}
	if passed != nil && max(last, restored) < passedIndex {
		// Neither an older snapshot nor the log reaches what the damaged one held
		// (a backup serve took is one snapshot and no log entry): Raft would start
		// from nothing, with no configuration, and wait for a leader for good.
		passed.Problem += fmt.Sprintf(", and neither an older snapshot nor the Raft log reaches entry %d, which it held (the log ends at entry %d, the newest whole snapshot is at entry %d): its state is lost", passedIndex, last, restored)
		return storesFound{}, passed
	}
	// Raft reads the last entry whatever the snapshot ("failed to get last log"
	// stops it with no advice), and the first when it compacts: both are read even
	// when the snapshot it restores is at or past them.
	for _, i := range []uint64{first, last} {
		if last == 0 {
			break
		}
		if err := checkEntry(store, path, i, first, last, restored); err != nil {
			return storesFound{}, err
		}
	}
	// Only what Raft reads: the entries after the snapshot it restores. A follower
	// that installed a snapshot from its leader keeps the entries it had before it,
	// with a gap up to the snapshot: that is no damage.
	for i := max(first, restored+1); i <= last && last > 0; i++ {
		if err := checkEntry(store, path, i, first, last, restored); err != nil {
			return storesFound{}, err
		}
	}
	if last > 0 || restored > 0 || len(snaps) > 0 {
		if _, err := store.GetUint64(stableCurrentTerm); err != nil {
			return storesFound{}, &DamageError{File: path, Problem: "has lost this node's Raft term and vote", Err: err}
		}
	}
	found.first, found.last, found.passedOver = first, last, passed
	return found, nil
}

// storesFound is what checkStores found in a member's stores.
type storesFound struct {
	// restored is the snapshot Raft restores at start (nil: none).
	restored *snapshotDir
	// first and last bound the log (both 0: it holds no entry).
	first, last uint64
	// passedOver is a newer snapshot that is not whole, which Raft passes over.
	passedOver *DamageError
}

// checkEntry reads entry i of the log first..last, restored being the index of the
// snapshot Raft restores.
func checkEntry(store *raftboltdb.BoltStore, path string, i, first, last, restored uint64) error {
	var l raft.Log
	if err := store.GetLog(i, &l); err != nil {
		return &DamageError{File: path, Problem: fmt.Sprintf("cannot give entry %d of %d..%d (the snapshot Raft restores is at %d)", i, first, last, restored), Err: err}
	}
	if l.Index != i {
		return &DamageError{File: path, Problem: fmt.Sprintf("holds entry %d under index %d", l.Index, i)}
	}
	return nil
}

// readPanic is the damage a panic reading raft.db at path says: bbolt's own words
// for a garbled page, and for a runtime error (a nil pointer: a bbolt file without
// Raft's buckets, restored from the wrong place), what the file is not, never the
// runtime's words, which read like a crash (a walkthrough).
func readPanic(path string, p any) error {
	if _, ok := p.(runtime.Error); ok {
		return &DamageError{File: path, Problem: "cannot be read as a Raft log: it is corrupt, cut short, or a file of something else (a bbolt file holding no Raft log)"}
	}
	return &DamageError{File: path, Problem: "is corrupt or cut short", Err: fmt.Errorf("%v", p)}
}
