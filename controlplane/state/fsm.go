package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/hashicorp/raft"
)

// FSM adapts State to raft.FSM. Reads go through Read, under a read lock, so the
// broker's authentication hook never copies the roster.
type FSM struct {
	mu    sync.RWMutex
	st    *State
	index uint64
	// next is closed, and replaced, when a command is applied or a snapshot
	// restored: Next hands it to those waiting for the state to move.
	next chan struct{}
	// onApply, when set, is called after each command is applied, outside the lock.
	onApply func(*Command, Result)
	// onUndecodable, when set, is called with each command entry that does not
	// decode (skipped), outside the lock.
	onUndecodable func(index uint64, err error)
	// onRestore, when set, is called after a snapshot replaced the state, outside
	// the lock.
	onRestore func()
	// halt is set, once, by the first entry this code's rules cannot apply
	// (*NewerRulesError); halted is closed then.
	halt   error
	halted chan struct{}
}

// NewFSM returns a state machine over an empty state.
func NewFSM() *FSM { return &FSM{st: New(), next: make(chan struct{}), halted: make(chan struct{})} }

// ErrNewerRules is the state machine's stop: the log holds an entry written under
// newer rules than this code applies (ApplyRules), by a newer version of meshctl.
// Applying it otherwise, or skipping it, would part this node's state from the
// others' for good; the node must run the version the others run.
var ErrNewerRules = errors.New("the Raft log holds an entry of a newer meshctl than this one")

// NewerRulesError is ErrNewerRules with the entry that stopped the state machine.
type NewerRulesError struct {
	Index uint64 // the entry's log index
	Op    string
	Rules int // the rules the entry needs
	// Snapshot: not an entry but a snapshot (sent by the leader, or this node's
	// own), holding a state built by entries of those rules.
	Snapshot bool
}

func (e *NewerRulesError) Error() string {
	what := fmt.Sprintf("entry %d (%s) needs the rules of version %d to apply it", e.Index, e.Op, e.Rules)
	if e.Snapshot {
		what = fmt.Sprintf("a snapshot holds a state built by entries of the rules of version %d", e.Rules)
	}
	return fmt.Sprintf("%v: %s and this meshctl has those of version %d: "+
		"install the meshctl the other control nodes run and start this node again (going back to an older meshctl is not supported)",
		ErrNewerRules, what, ApplyRules)
}

// Is makes errors.Is(err, ErrNewerRules) hold.
func (e *NewerRulesError) Is(target error) bool { return target == ErrNewerRules }

// Halted returns a channel closed when the state machine stops at an entry of newer
// rules; HaltErr then says which.
func (f *FSM) Halted() <-chan struct{} { return f.halted }

// HaltErr returns the *NewerRulesError the state machine stopped at, or nil.
func (f *FSM) HaltErr() error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.halt
}

// Next returns a channel closed when the state next moves: a command applied (one
// that does not decode included) or a snapshot restored. Take it before looking at the state, so
// that a change in between is not missed.
func (f *FSM) Next() <-chan struct{} {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.next
}

// moved wakes the waiters of Next. f.mu must be held for writing.
func (f *FSM) moved() {
	close(f.next)
	f.next = make(chan struct{})
}

// OnApply registers a function called after every applied command (on every control
// node, leader or not). It must not block for long: it runs on Raft's apply goroutine.
func (f *FSM) OnApply(fn func(*Command, Result)) {
	f.mu.Lock()
	f.onApply = fn
	f.mu.Unlock()
}

// OnUndecodable registers a function called with each command entry that does not
// decode, which the state machine skips: every leader writes commands that decode,
// so such an entry is most likely garbled on this node's disk, and this node's state
// is then no longer the others' (a walkthrough: nothing said so). It runs on Raft's
// apply goroutine.
func (f *FSM) OnUndecodable(fn func(index uint64, err error)) {
	f.mu.Lock()
	f.onUndecodable = fn
	f.mu.Unlock()
}

// OnRestore registers a function called after a snapshot replaced the state: this
// node's own as it starts, or the leader's, sent to a follower too far behind for
// the log. The commands the snapshot stands for are not applied one by one, and
// OnApply hears nothing of them. It runs on Raft's goroutine.
func (f *FSM) OnRestore(fn func()) {
	f.mu.Lock()
	f.onRestore = fn
	f.mu.Unlock()
}

// Apply implements raft.FSM.
func (f *FSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return Result{}
	}
	if err := f.HaltErr(); err != nil {
		// Nothing after the entry that stopped it is applied either: the state
		// stays as the others' was before it, and no snapshot is taken of it.
		return Result{Err: err}
	}
	var c Command
	if err := json.Unmarshal(l.Data, &c); err != nil {
		// A command that does not decode is skipped identically on every node.
		f.mu.Lock()
		f.index = l.Index
		f.moved()
		hook := f.onUndecodable
		f.mu.Unlock()
		if hook != nil {
			hook(l.Index, err)
		}
		return Result{Err: fmt.Errorf("%w: %v", ErrBadCommand, err)}
	}
	if c.Rules > ApplyRules {
		err := &NewerRulesError{Index: l.Index, Op: c.Op, Rules: c.Rules}
		f.mu.Lock()
		f.halt = err
		close(f.halted)
		f.moved()
		f.mu.Unlock()
		return Result{Err: err}
	}
	f.mu.Lock()
	res := f.st.apply(&c)
	if res.Err == nil && c.Rules > f.st.Rules {
		// A refused command changes nothing, by whatever rules it was refused.
		f.st.Rules = c.Rules
	}
	f.index = l.Index
	f.moved()
	hook := f.onApply
	f.mu.Unlock()
	if hook != nil {
		hook(&c, res)
	}
	return res
}

// Read runs fn with the live state under a read lock. fn must not keep references
// to the state after it returns, nor modify it.
func (f *FSM) Read(fn func(*State)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(f.st)
}

// Snapshot returns a deep copy of the state.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.halt != nil {
		return nil, f.halt
	}
	// A copy sharing nothing a command changes (State.Clone), encoded by
	// Persist, which Raft runs beside Apply: encoded
	// here, under the read lock on Raft's FSM goroutine, a fleet's state held
	// every Apply 4 to 7 times as long (BenchmarkSnapshotOfAFleet).
	return stateSnapshot{st: f.st.snapshotCopy()}, nil
}

// ErrBadSnapshot is Restore's refusal of a snapshot it cannot use; the state stays
// as it was.
var ErrBadSnapshot = errors.New("unusable state snapshot")

// Restore replaces the state with a snapshot's.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	st, err := decodeSnapshot(rc)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBadSnapshot, err)
	}
	if st.Rules > ApplyRules {
		// As for an entry of newer rules (Apply): nothing of it is taken, and
		// nothing is applied after it; the node stops until it runs the newer
		// meshctl.
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.halt == nil {
			f.halt = &NewerRulesError{Rules: st.Rules, Snapshot: true}
			close(f.halted)
			f.moved()
		}
		return nil
	}
	fillMaps(st)
	st.reindex()
	f.mu.Lock()
	f.st = st
	f.moved()
	hook := f.onRestore
	f.mu.Unlock()
	if hook != nil {
		hook()
	}
	return nil
}

// decodeSnapshot reads a snapshot: one JSON object, nothing after it, and no null
// where a token, a node or a control node belongs (the state dereferences them all).
func decodeSnapshot(r io.Reader) (*State, error) {
	dec := json.NewDecoder(r)
	var st *State
	if err := dec.Decode(&st); err != nil {
		return nil, err
	}
	if st == nil {
		return nil, errors.New("it is null")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("data after the state")
	}
	for id, t := range st.Tokens {
		if t == nil {
			return nil, fmt.Errorf("token %q is null", id)
		}
	}
	for id, n := range st.Nodes {
		if n == nil {
			return nil, fmt.Errorf("node %q is null", id)
		}
	}
	for id, c := range st.ControlNodes {
		if c == nil {
			return nil, fmt.Errorf("control node %q is null", id)
		}
	}
	for key, o := range st.Operators {
		if o == nil {
			return nil, fmt.Errorf("operator %q is null", key)
		}
	}
	return st, nil
}

// AppliedIndex is the index of the last log entry applied.
func (f *FSM) AppliedIndex() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.index
}

func fillMaps(st *State) {
	if st.Tokens == nil {
		st.Tokens = map[string]*Token{}
	}
	if st.Nodes == nil {
		st.Nodes = map[string]*Node{}
	}
	if st.Bodies == nil {
		st.Bodies = map[string]json.RawMessage{}
	}
	if st.RevokedKeys == nil {
		st.RevokedKeys = map[string]string{}
	}
	if st.ControlNodes == nil {
		st.ControlNodes = map[string]*ControlNode{}
	}
}

// stateSnapshot is a copy of the state that shares nothing a command changes
// (State.Clone), encoded as it is persisted.
type stateSnapshot struct{ st *State }

func (s stateSnapshot) Persist(sink raft.SnapshotSink) error {
	data, err := json.Marshal(s.st)
	if err != nil {
		sink.Cancel()
		return fmt.Errorf("encode state snapshot: %w", err)
	}
	if _, err := sink.Write(data); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s stateSnapshot) Release() {}
