package replication

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// TestGuardedStoreAfterClose: the store Raft is given passes calls through; close
// waits for a call under way; a call after close (a heartbeat raft's Shutdown left
// behind, hashicorp/raft#717) never reaches the closed database, so it can neither
// fail (raft panics on a store error) nor succeed untruly.
func TestGuardedStoreAfterClose(t *testing.T) {
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(t.TempDir(), "raft.db")})
	if err != nil {
		t.Fatal(err)
	}
	s := &guardedStore{inner: bolt}
	if err := s.StoreLog(&raft.Log{Index: 1, Term: 1, Type: raft.LogCommand, Data: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetUint64([]byte("CurrentTerm"), 3); err != nil {
		t.Fatal(err)
	}
	var l raft.Log
	if err := s.GetLog(1, &l); err != nil || string(l.Data) != "x" {
		t.Fatalf("GetLog: %v %q", err, l.Data)
	}
	if term, err := s.GetUint64([]byte("CurrentTerm")); err != nil || term != 3 {
		t.Fatalf("GetUint64: %d %v", term, err)
	}

	// A call under way holds close back until it is done.
	s.enter()
	closed := make(chan struct{})
	go func() { s.close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("close returned while a call was under way")
	case <-time.After(100 * time.Millisecond):
	}
	s.leave()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("close did not return once the call was done")
	}

	// After close: the database is closed under a late heartbeat's write and
	// read, which stay parked instead of failing.
	if err := bolt.Close(); err != nil {
		t.Fatal(err)
	}
	returned := make(chan error, 2)
	go func() { returned <- s.SetUint64([]byte("CurrentTerm"), 4) }()
	go func() { returned <- s.GetLog(1, &raft.Log{}) }()
	select {
	case err := <-returned:
		t.Fatalf("a call after close returned (%v); raft panics on an error, and a success would be untrue", err)
	case <-time.After(200 * time.Millisecond):
	}
	// The two goroutines stay parked until the test binary exits, as a late
	// heartbeat's does in a closing process.
}

// TestATermNotRecordedIsHandedOver: when the store cannot record Raft's term or vote
// (a file system turned read-only), raft panics once the call returns; the error
// goes to Config.TermNotRecorded first, for the process to stop saying why. A log
// write's failure is not such an error: raft logs it and steps down.
func TestATermNotRecordedIsHandedOver(t *testing.T) {
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(t.TempDir(), "raft.db")})
	if err != nil {
		t.Fatal(err)
	}
	var handed []error
	s := &guardedStore{inner: bolt, termNotRecorded: func(err error) { handed = append(handed, err) }}
	if err := s.SetUint64([]byte("CurrentTerm"), 3); err != nil || len(handed) != 0 {
		t.Fatalf("a term recorded: %v, handed %v", err, handed)
	}
	bolt.Close() // the database fails every write from here on, as a read-only one does
	s.StoreLog(&raft.Log{Index: 1, Term: 1, Type: raft.LogCommand})
	errTerm := s.SetUint64([]byte("CurrentTerm"), 4)
	errVote := s.Set([]byte("LastVoteCand"), []byte("cp-2"))
	if errTerm == nil || errVote == nil || len(handed) != 2 || handed[0] != errTerm || handed[1] != errVote {
		t.Fatalf("term %v, vote %v; handed over %v: want both, and nothing of the log write", errTerm, errVote, handed)
	}
}
