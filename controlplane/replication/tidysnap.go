package replication

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// tidySnapshots is the snapshot store Raft is given: hashicorp/raft's file store,
// which leaves the directory of a snapshot it failed to create behind
// (term-index-msec.tmp, when meta.json or state.bin cannot be written: a full
// disk) and never looks at it again. Raft tries again at every snapshot interval,
// so a disk full for a day left hundreds of them, each an inode and on most file
// systems a block, taken from the disk that had no room, and kept after it had.
// Create removes what its failed attempt left, and opening the store removes what
// a node stopped (or killed) in the middle of a snapshot left.
//
// It also keeps the error of the last snapshot write when none succeeded since
// (writeErr): raft only logs it, and a follower that cannot write the snapshot its
// leader sends (a full disk) stays behind for good.
type tidySnapshots struct {
	raft.SnapshotStore
	dir      string // the snapshots directory
	log      hclog.Logger
	writeErr atomic.Pointer[error]
}

// newTidySnapshots opens the file snapshot store in dir (raft/, which holds
// snapshots/), removing the temporary directories left there.
func newTidySnapshots(dir string, retain int, log hclog.Logger) (*tidySnapshots, error) {
	inner, err := raft.NewFileSnapshotStoreWithLogger(dir, retain, log)
	if err != nil {
		return nil, err
	}
	s := &tidySnapshots{SnapshotStore: inner, dir: filepath.Join(dir, "snapshots"), log: log}
	// Nothing writes a snapshot yet: every temporary one is an attempt that ended.
	if n := s.removeTemporary(func(uint64, uint64, int64) bool { return true }); n > 0 {
		log.Info("removed the unfinished Raft snapshots a stop or a failure left", "count", n, "dir", s.dir)
	}
	return s, nil
}

// Create implements raft.SnapshotStore.
func (s *tidySnapshots) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	from := time.Now().UnixMilli()
	sink, err := s.SnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		to := time.Now().UnixMilli()
		// Only this attempt's: its term and index, named within the call. Raft
		// may create another snapshot meanwhile (one sent by a leader), never of
		// the same term and index in the same milliseconds.
		s.removeTemporary(func(t, i uint64, msec int64) bool { return t == term && i == index && msec >= from && msec <= to })
		s.noteWrite(err)
		return sink, err
	}
	return &notedSink{SnapshotSink: sink, store: s}, nil
}

// noteWrite records how a snapshot write ended.
func (s *tidySnapshots) noteWrite(err error) {
	if err == nil {
		s.writeErr.Store(nil)
		return
	}
	s.writeErr.Store(&err)
}

// lastWriteError is the error of the last snapshot write when none succeeded since.
func (s *tidySnapshots) lastWriteError() error {
	if p := s.writeErr.Load(); p != nil {
		return *p
	}
	return nil
}

// notedSink is a snapshot being written, its failure noted in its store.
type notedSink struct {
	raft.SnapshotSink
	store  *tidySnapshots
	failed bool
}

func (k *notedSink) Write(p []byte) (int, error) {
	n, err := k.SnapshotSink.Write(p)
	if err != nil {
		k.failed = true
		k.store.noteWrite(err)
	}
	return n, err
}

func (k *notedSink) Close() error {
	err := k.SnapshotSink.Close()
	if err != nil || !k.failed {
		k.store.noteWrite(err)
	}
	return err
}

// removeTemporary removes the temporary snapshot directories (term-index-msec.tmp)
// match accepts, and returns how many it removed.
func (s *tidySnapshots) removeTemporary(match func(term, index uint64, msec int64) bool) int {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return 0
	}
	removed := 0
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".tmp")
		if !ok || !e.IsDir() {
			continue
		}
		parts := strings.Split(name, "-")
		if len(parts) != 3 {
			continue
		}
		term, err1 := strconv.ParseUint(parts[0], 10, 64)
		index, err2 := strconv.ParseUint(parts[1], 10, 64)
		msec, err3 := strconv.ParseInt(parts[2], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || !match(term, index, msec) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(s.dir, e.Name())); err != nil {
			s.log.Warn("could not remove an unfinished Raft snapshot", "dir", filepath.Join(s.dir, e.Name()), "err", err)
			continue
		}
		removed++
	}
	return removed
}
