// Package replication runs the control plane's state machine under hashicorp/raft,
// with a durable bolt store for the log, a file snapshot store, and a transport over
// mutual TLS. One control node is a one-voter cluster: high availability is the same
// code path with more voters.
package replication

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"mesh/controlplane/state"
	"mesh/host/atomicfile"
	"mesh/host/readfile"
	"mesh/logging"
)

// Config describes one Raft member.
type Config struct {
	// Dir holds raft.db and the snapshots.
	Dir string
	// ID is this control node's id.
	ID string
	// Bind is the ip:port the Raft transport listens on; Advertise, when set, is the
	// address other members dial (defaults to Bind).
	Bind      string
	Advertise string
	// TLS is the mutual TLS configuration between control nodes.
	TLS *tls.Config
	// FSM is the state machine Raft drives on this member.
	FSM raft.FSM
	// EmptyFSM makes an empty state machine of FSM's kind. Recovery from the peers
	// file replays the log into one to compute the snapshot the member starts from,
	// and Raft requires that one to be discarded afterwards. Nil refuses that recovery.
	EmptyFSM func() raft.FSM
	// Timeouts tunes Raft; zero fields take DefaultTimeouts'.
	Timeouts Timeouts
	Logger   *slog.Logger
	// Now stamps the commands this member proposes; nil means time.Now.
	Now func() time.Time
	// ApplyObserver, when set, is told how long each command this member proposed
	// took to be committed and applied.
	ApplyObserver func(time.Duration)
	// PeerAllowed, when set, says whether the peer whose leaf has this pin (the
	// hex SHA-256 of its SubjectPublicKeyInfo) is a current control node; the Raft
	// port refuses any other, in both directions, though its leaf is the mesh
	// CA's. It is asked about every connection accepted or dialled, from many
	// goroutines at once, and should answer quickly. A change in what it answers
	// holds for new connections; DropPeersNotAllowed closes the open ones. Nil
	// allows every leaf the mesh CA signed.
	PeerAllowed func(pin string) bool
	// Members, when set, answers another member's AskMembers: which peers this one
	// accepts, in a form the caller decodes. It is asked only by a peer PeerAllowed
	// allows, on Raft's goroutine for the connection.
	Members func() []byte
	// MustHoldState says the member was made one before (by bootstrap or a join):
	// Open then refuses, with ErrStateLost and before it creates anything, stores
	// that hold no log entry and no snapshot, instead of starting a member that
	// knows no cluster.
	MustHoldState bool
	// LogAhead, when set, is called once as the member opens, before Raft starts,
	// with what its stores hold beyond the snapshot Raft restores (the state machine
	// applies those entries only once a leader says they committed), to read then
	// or later: nothing is read before the caller ranges over it.
	LogAhead func(LogTail)
	// TermNotRecorded, when set, is called when Raft could not record its term or
	// its vote in the store (the disk went read-only after an error, or failed):
	// hashicorp/raft panics once the store returns such an error, since a member
	// that cannot remember its vote could vote twice in a term. It is meant not to
	// return (the process exits, naming the error); if it does, Raft panics.
	TermNotRecorded func(error)
}

// Node is a running Raft member.
type Node struct {
	// id is this member's server id (Config.ID).
	id  raft.ServerID
	now func() time.Time
	// observe is Config.ApplyObserver.
	observe func(time.Duration)
	raft    *raft.Raft
	fsm     *appliedFSM
	store   *raftboltdb.BoltStore
	guarded *guardedStore
	snaps   raft.SnapshotStore
	trans   *raft.NetworkTransport
	stream  *tlsStream
	leader  chan bool
	log     *slog.Logger
	// leaders counts the leaders this member has learnt of (observeLeaders).
	leaders atomic.Uint64
	// counted is the last leader counted, with the term it was counted in: the
	// same leader learnt again in the same term is not another.
	counted struct {
		sync.Mutex
		id   raft.ServerID
		term uint64
	}
}

// ErrNotLeader means a write was proposed on a control node that is not the leader.
var ErrNotLeader = errors.New("this control node is not the Raft leader")

// ErrNotAppended marks a failed write that never reached the log: proposed on a
// node that did not lead, or while it handed its leadership over. Sending it again
// cannot make it happen twice. A write that fails otherwise (the leadership lost
// after the entry was appended, a timeout) may still be committed.
var ErrNotAppended = errors.New("the command never reached the Raft log")

// ErrCommitPending marks a command that Raft took up and did not answer within
// the wait Apply allows (a fifth more than its timeout): an entry appended whose commit hangs,
// as on a leader whose log write does not return (a disk that does not answer). It
// may still be committed. Raft's own timeout bounds only the taking up, and the
// callers, an operator's handler among them, waited for good.
var ErrCommitPending = errors.New("the command was taken up by Raft and is not committed yet")

// ErrLeadershipLost marks a change of the Raft configuration (AddNonvoter, Promote,
// Demote, Remove) that this node appended as leader and then lost its leadership
// before the change was committed: a new leader may commit it or drop it, and
// until one is elected the control plane has none. Doing it again helps only once
// a leader serves.
var ErrLeadershipLost = errors.New("leadership lost before the change was committed")

// changeError classifies the error of a change of the Raft configuration as Apply
// does a command's: ErrNotLeader and ErrNotAppended for a change raft did not take,
// ErrLeadershipLost for one it had appended, ErrCommitPending for one still not
// committed a fifth past its timeout (waited for as a command is: each change runs
// under the lock that runs operators' changes one at a time, and a log write that
// does not return held them all, a review).
func changeError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return fmt.Errorf("%w: %w: %w", ErrNotLeader, ErrNotAppended, err)
	case errors.Is(err, raft.ErrLeadershipLost):
		return fmt.Errorf("%w: %w", ErrLeadershipLost, err)
	}
	return err
}

func openStores(dir string, log hclog.Logger, mustHoldState bool) (*raftboltdb.BoltStore, raft.SnapshotStore, error) {
	if mustHoldState {
		if err := checkHoldsState(dir); err != nil {
			return nil, nil, err
		}
	}
	// raft/ flushed into the data directory, and, below, raft.db and snapshots/
	// into raft/ when this made them: bbolt flushes the file, not its name, and a
	// power cut after bootstrap or join said the mesh exists could lose the store.
	if err := atomicfile.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, err
	}
	_, dberr := os.Lstat(raftDBPath(dir))
	_, snaperr := os.Lstat(filepath.Join(dir, "snapshots"))
	made := errors.Is(dberr, fs.ErrNotExist) || errors.Is(snaperr, fs.ErrNotExist)
	// Checked before Raft reads them: it, and bbolt under it, panic on a damaged
	// store or start from an emptied one (damage.go).
	if err := checkRaftDBPresent(dir); err != nil {
		return nil, nil, err
	}
	store, err := openBolt(dir)
	if err != nil {
		return nil, nil, err
	}
	if mustHoldState {
		// Before checkStores, whose snapshot store creates snapshots/.
		if err := checkNotEmpty(dir, store); err != nil {
			store.Close()
			return nil, nil, err
		}
	}
	// The snapshots are read by a store of their own, as Raft will read them.
	check, err := raft.NewFileSnapshotStoreWithLogger(dir, snapshotsRetained, hclog.NewNullLogger())
	if err != nil {
		store.Close()
		return nil, nil, fmt.Errorf("open raft snapshots: %w", err)
	}
	found, err := checkStores(dir, store, func(id string) (io.ReadCloser, error) {
		_, rc, err := check.Open(id)
		return rc, err
	})
	if err != nil {
		store.Close()
		return nil, nil, err
	}
	if found.passedOver != nil {
		log.Warn("a Raft snapshot is damaged; starting from the one before it and the log, which hold the same state", "file", found.passedOver.File, "problem", found.passedOver.Problem)
	}
	snaps, err := newTidySnapshots(dir, snapshotsRetained, log)
	if err != nil {
		store.Close()
		return nil, nil, fmt.Errorf("open raft snapshots: %w", err)
	}
	if made {
		if err := atomicfile.SyncDir(dir); err != nil {
			store.Close()
			return nil, nil, fmt.Errorf("flush %s: %w", dir, err)
		}
	}
	return store, snaps, nil
}

// Bootstrap makes dir a one-voter cluster with this node as its only member. It
// reports done=false, with no error, if the stores already hold a cluster: bootstrap
// is then a resume, never a second cluster.
func Bootstrap(cfg Config) (done bool, err error) {
	log := raftLogger(orDefault(cfg.Logger), nil)
	if err := clearStoppedBootstrap(cfg.Dir, log); err != nil {
		return false, err
	}
	store, snaps, err := openStores(cfg.Dir, log, false)
	if err != nil {
		return false, err
	}
	defer store.Close()
	addr := cfg.Advertise
	if addr == "" {
		addr = cfg.Bind
	}
	_, trans := raft.NewInmemTransport(raft.ServerAddress(addr))
	conf := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(cfg.ID), Address: raft.ServerAddress(addr)}}}
	err = raft.BootstrapCluster(raftConfig(cfg, log), store, store, snaps, trans, conf)
	if errors.Is(err, raft.ErrCantBootstrap) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("bootstrap raft: %w", err)
	}
	return true, nil
}

// HasState reports whether dir holds a Raft cluster's state: a log entry or a
// snapshot, what a member needs to start (Config.MustHoldState). A term with
// neither is a bootstrap stopped part way (its configuration entry not written),
// which Bootstrap starts again.
func HasState(dir string) (bool, error) {
	fi, err := os.Stat(filepath.Join(dir, "raft.db"))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err == nil && fi.Size() == 0 {
		// Opened, bbolt would write its first pages into it: a question that
		// changes nothing (bootstrap refusing a directory) would have.
		if snaps, err := snapshotDirs(dir); err != nil || len(snaps) > 0 {
			return err == nil, err
		}
		return false, nil
	}
	// The snapshot store opened to check the stores makes snapshots/: a question
	// leaves no directory behind that was not there.
	snapDir := filepath.Join(dir, "snapshots")
	if _, err := os.Stat(snapDir); errors.Is(err, os.ErrNotExist) {
		defer os.Remove(snapDir) // only if empty
	}
	store, _, err := openStores(dir, hclog.NewNullLogger(), false)
	if err != nil {
		return false, err
	}
	defer store.Close()
	return holdsEntries(dir, store)
}

// holdsEntries reports whether store holds a log entry or dir a snapshot.
func holdsEntries(dir string, store *raftboltdb.BoltStore) (bool, error) {
	if snaps, err := snapshotDirs(dir); err != nil || len(snaps) > 0 {
		return err == nil, err
	}
	last, err := store.LastIndex()
	return last > 0, err
}

// clearStoppedBootstrap removes the raft.db of a bootstrap that stopped after
// hashicorp/raft recorded the first term and before it wrote the configuration
// entry (a failed write or flush): no entry, no snapshot. BootstrapCluster refuses
// any store with a term in it ("bootstrap only works on new clusters"), so the
// bootstrap could not be finished, and serve refuses a store without an entry: the
// node was stuck. Nothing was committed, and no other member knows of the cluster.
func clearStoppedBootstrap(dir string, log hclog.Logger) error {
	path := raftDBPath(dir)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	store, err := openBolt(dir)
	if err != nil {
		return err
	}
	term, err := store.GetUint64(stableCurrentTerm)
	if err != nil && !errors.Is(err, raftboltdb.ErrKeyNotFound) {
		store.Close()
		return err
	}
	held, err := holdsEntries(dir, store)
	store.Close()
	if err != nil || held || term == 0 {
		return err
	}
	log.Warn("an earlier bootstrap stopped before its Raft configuration was written; starting it again", "file", path)
	return os.Remove(path)
}

// Open starts the Raft member on its stores and transport.
func Open(cfg Config) (*Node, error) {
	log := orDefault(cfg.Logger)
	repeats := logging.NewLimiter(logging.RepeatInterval, time.Now)
	rlog := raftLogger(log, repeats)
	t := cfg.Timeouts.withDefaults()
	store, snaps, err := openStores(cfg.Dir, rlog, cfg.MustHoldState)
	if err != nil {
		return nil, err
	}
	var adv net.Addr
	if cfg.Advertise != "" {
		adv, err = net.ResolveTCPAddr("tcp", cfg.Advertise)
		if err != nil {
			store.Close()
			return nil, fmt.Errorf("raft advertise address: %w", err)
		}
	}
	stream, err := newTLSStream(cfg.Bind, adv, cfg.TLS, cfg.PeerAllowed, cfg.Members, log.With("component", "raft"), repeats, t.Handshake)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("raft: %w", err)
	}
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  stream,
		MaxPool: transportPool,
		Timeout: transportTimeout,
		Logger:  rlog,
	})
	rc := raftConfig(cfg, rlog)
	if err := recoverFromPeersFile(cfg, rc, store, snaps, trans, log); err != nil {
		trans.Close()
		store.Close()
		return nil, err
	}
	if cfg.LogAhead != nil {
		tail, err := logTail(cfg, store, snaps)
		if err != nil {
			trans.Close()
			store.Close()
			return nil, err
		}
		cfg.LogAhead(tail)
	}
	leader := make(chan bool, 16)
	rc.NotifyCh = leader
	fsm := &appliedFSM{FSM: cfg.FSM, snaps: snaps}
	guarded := &guardedStore{inner: store, termNotRecorded: cfg.TermNotRecorded}
	r, err := raft.NewRaft(rc, fsm, guarded, guarded, snaps, trans)
	if err != nil {
		trans.Close()
		store.Close()
		return nil, fmt.Errorf("start raft: %w", err)
	}
	fsm.raft.Store(r)
	// The members' addresses, as this node knows them at start: their handshakes
	// on the Raft port are not pushed out by strangers' (gate.go) before any of
	// them has dialled.
	if f := r.GetConfiguration(); f.Error() == nil {
		for _, srv := range f.Configuration().Servers {
			if ap, err := netip.ParseAddrPort(string(srv.Address)); err == nil {
				stream.gate.learnPeer(ap.Addr())
			}
		}
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	n := &Node{id: raft.ServerID(cfg.ID), now: now, observe: cfg.ApplyObserver, raft: r, fsm: fsm, store: store, guarded: guarded, snaps: snaps, trans: trans, stream: stream, leader: leader, log: log}
	n.observeLeaders()
	electAloneAtOnce(r, rc)
	return n, nil
}

// observeLeaders counts each leader this member learns of: the first after it
// starts, and each one after an election, the same node again included (the term
// also grows on elections nobody won, so it cannot say how often the leader
// changed). hashicorp/raft observes a leader when it learns of one that differs from
// the last it knew, none included, and calls an observer's filter on the goroutine
// that learnt it (Raft's, or the transport's heartbeat path) for each observation:
// counted there and never queued, none is dropped, and Raft waits on nothing of
// ours. A leader is counted once per term: during a transfer a follower forgets the
// leader before it takes the new term, and a heartbeat of the old leader landing
// between the two had it learn the old leader again, in the same term, with no
// election (TestTransferLeadership failed 1 run in 7 under load).
func (n *Node) observeLeaders() {
	n.raft.RegisterObserver(raft.NewObserver(nil, false, func(o *raft.Observation) bool {
		lo, ok := o.Data.(raft.LeaderObservation)
		if !ok || lo.LeaderID == "" {
			return false
		}
		term := n.raft.CurrentTerm()
		n.counted.Lock()
		defer n.counted.Unlock()
		if lo.LeaderID != n.counted.id || term != n.counted.term {
			n.counted.id, n.counted.term = lo.LeaderID, term
			n.leaders.Add(1)
		}
		return false
	}))
}

// electAloneAtOnce lets a node that is the only voter of its configuration elect
// itself as soon as it starts. hashicorp/raft would have it wait out a whole
// heartbeat timeout (randomised up to twice Heartbeat) for a leader that cannot
// exist until it elects itself, and a restarted single control node would answer
// nothing for seconds. ReloadConfig with a shorter heartbeat timeout makes a
// follower check at once (its documented behaviour); the timeout is restored as
// soon as the node leads, or after a few seconds if it does not.
func electAloneAtOnce(r *raft.Raft, rc *raft.Config) {
	f := r.GetConfiguration()
	if f.Error() != nil {
		return
	}
	servers := f.Configuration().Servers
	if len(servers) != 1 || servers[0].ID != rc.LocalID || servers[0].Suffrage != raft.Voter {
		return
	}
	normal := r.ReloadableConfig()
	fast := normal
	// The shortest heartbeat timeout the configuration allows: not under the
	// leader lease (raft.ValidateConfig).
	fast.HeartbeatTimeout = rc.LeaderLeaseTimeout
	if fast.HeartbeatTimeout >= normal.HeartbeatTimeout || r.ReloadConfig(fast) != nil {
		return
	}
	go func() {
		deadline := time.Now().Add(5 * time.Second)
		for r.State() != raft.Leader && r.State() != raft.Shutdown && time.Now().Before(deadline) {
			time.Sleep(pollInterval)
		}
		_ = r.ReloadConfig(normal)
	}()
}

// DropPeersNotAllowed closes every Raft connection, accepted or dialled, whose peer
// Config.PeerAllowed no longer allows, and returns how many it closed. Call it once
// PeerAllowed answers for the new membership: a connection opened meanwhile is
// either closed here or checked against the new answers. Raft dials again as it
// needs to, and each new connection is checked. Without PeerAllowed it closes
// nothing.
func (n *Node) DropPeersNotAllowed() int {
	closed := n.stream.dropNotAllowed()
	if closed > 0 {
		n.stream.log.Info("closed the Raft connections of peers that are no longer control nodes", "connections", closed)
	}
	return closed
}

// LeaderChanges delivers true when this node becomes leader and false when it stops
// being leader.
func (n *Node) LeaderChanges() <-chan bool { return n.leader }

// IsLeader reports whether this node is the leader now.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// WaitReady blocks until this node is leader and has applied every entry committed
// before it became leader (a barrier), or until ctx ends. A control node serves
// nothing before its state is current.
func (n *Node) WaitReady(ctx context.Context) error {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		if n.IsLeader() {
			if err := n.Barrier(barrierTimeout); err == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for this control node to become Raft leader: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// Barrier blocks until every entry before it in the log is applied to the state
// machine: the leader's state is then current. It fails on a follower (ErrNotLeader).
func (n *Node) Barrier(timeout time.Duration) error {
	err := n.raft.Barrier(timeout).Error()
	if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	}
	return err
}

// BarrierWithin is Barrier waited for at most a fifth more than timeout, as Apply's
// commit is (ErrCommitPending past it): raft's own timeout bounds only the
// barrier's queueing, and a log write that never returns held the caller for good.
func (n *Node) BarrierWithin(timeout time.Duration) error {
	err := settled(n.raft.Barrier(timeout), timeout+timeout/5)
	if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	}
	return err
}

// ApplyIndex is Apply for commands whose log index matters (probe entries).
func (n *Node) ApplyIndex(c state.Command, timeout time.Duration) (uint64, error) {
	res, index, err := n.apply(c, timeout)
	if err == nil && res.Err != nil {
		err = res.Err
	}
	return index, err
}

// Apply proposes a command and waits for it to be applied, returning the state
// machine's result: timeout bounds Raft's taking it up, and the whole wait is at
// most a fifth more than timeout (ErrCommitPending past it). The command's time is stamped
// here, on the leader.
func (n *Node) Apply(c state.Command, timeout time.Duration) (state.Result, error) {
	res, _, err := n.apply(c, timeout)
	return res, err
}

func (n *Node) apply(c state.Command, timeout time.Duration) (state.Result, uint64, error) {
	if !n.IsLeader() {
		return state.Result{}, 0, fmt.Errorf("%w: %w", ErrNotLeader, ErrNotAppended)
	}
	if c.At.IsZero() {
		c.At = n.now().UTC()
	}
	data, err := json.Marshal(c)
	if err != nil {
		return state.Result{}, 0, fmt.Errorf("encode command: %w", err)
	}
	start := time.Now()
	f := n.raft.Apply(data, timeout)
	// A fifth past Raft's own bound: the answer reaches meshctl within its
	// default --timeout (15s) at the daemon's 10s.
	err = settled(f, timeout+timeout/5)
	if n.observe != nil {
		n.observe(time.Since(start))
	}
	if err != nil {
		// raft answers ErrNotLeader and ErrLeadershipTransferInProgress for a
		// command it did not take, ErrLeadershipLost for one it had appended.
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipTransferInProgress) {
			return state.Result{}, 0, fmt.Errorf("%w: %w: %w", ErrNotLeader, ErrNotAppended, err)
		}
		if errors.Is(err, raft.ErrLeadershipLost) {
			return state.Result{}, 0, fmt.Errorf("%w: %w", ErrNotLeader, err)
		}
		if errors.Is(err, ErrCommitPending) {
			return state.Result{}, 0, fmt.Errorf("commit %s: %w after %s (a log write that does not return: a disk that does not answer?)", c.Op, err, time.Since(start).Round(time.Second))
		}
		return state.Result{}, 0, fmt.Errorf("commit %s: %w", c.Op, err)
	}
	res, _ := f.Response().(state.Result)
	return res, f.Index(), nil
}

// settled is f's error, waited for at most wait; ErrCommitPending past it. The wait
// for f goes on in a goroutine of its own, which ends when Raft answers it (once the
// log write returns, or at Raft's shutdown).
func settled(f raft.Future, wait time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return ErrCommitPending
	}
}

// Close shuts Raft down and closes the stores.
func (n *Node) Close() error {
	err := n.raft.Shutdown().Error()
	n.trans.Close()
	n.guarded.close()
	if cerr := n.store.Close(); err == nil {
		err = cerr
	}
	return err
}

// WaitFollowing blocks until this node knows a leader and its state machine has
// applied everything it knows to be committed (AppliedIndex), or until ctx ends. A
// follower serves its broker only then, so its authentication hook never decides
// from a stale roster, and its broker's routes name every other control node.
func (n *Node) WaitFollowing(ctx context.Context) error {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		if n.IsLeader() {
			return n.WaitReady(ctx)
		}
		if n.Current() {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for this control node to catch up with the leader: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// Current reports whether this member's state machine holds everything it knows to
// be committed: it knows the leader (itself, perhaps) and has applied up to the
// commit index it knows.
func (n *Node) Current() bool {
	if addr, _ := n.raft.LeaderWithID(); addr == "" {
		return false
	}
	commit := n.raft.CommitIndex()
	return commit > 0 && n.AppliedIndex() >= commit
}

// Member is one server of the Raft configuration.
type Member struct {
	ID      string
	Address string
	Voter   bool
}

// Members returns the current Raft configuration.
func (n *Node) Members() ([]Member, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	var out []Member
	for _, s := range f.Configuration().Servers {
		out = append(out, Member{ID: string(s.ID), Address: string(s.Address), Voter: s.Suffrage == raft.Voter})
	}
	return out, nil
}

// ConfigurationText is the Raft configuration this member holds, one line that two
// members holding the same configuration write alike: each server's id, address and
// vote ("v" or "n"), sorted by id. "" when it cannot tell.
func (n *Node) ConfigurationText() string {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return ""
	}
	var servers []string
	for _, s := range f.Configuration().Servers {
		vote := "n"
		if s.Suffrage == raft.Voter {
			vote = "v"
		}
		servers = append(servers, string(s.ID)+"@"+string(s.Address)+":"+vote)
	}
	slices.Sort(servers)
	return ConfigurationTextFormat + strings.Join(servers, ",")
}

// ConfigurationTextFormat begins ConfigurationText: a leader compares only texts
// of its own format, so that another version's members are never judged apart.
const ConfigurationTextFormat = "1|"

// ConfigurationIDs are the server ids a ConfigurationText of this format lists
// (nil for another format).
func ConfigurationIDs(text string) []string {
	rest, ok := strings.CutPrefix(text, ConfigurationTextFormat)
	if !ok || rest == "" {
		return nil
	}
	var ids []string
	for _, s := range strings.Split(rest, ",") {
		id, _, _ := strings.Cut(s, "@")
		ids = append(ids, id)
	}
	return ids
}

// SpreadConfiguration appends the leader's Raft configuration to the log again,
// unchanged, so that every member takes it as it appends the entry: Raft sends a
// configuration only in a log entry (or a snapshot), and a member holding another
// one keeps it until the next change. hashicorp/raft installs a snapshot older
// than the entries a member has, and takes that snapshot's configuration, which
// the entries it then receives again do not replace (a walkthrough: a rejoined
// control node so held one in which it and another voter did not vote, and
// refused every vote when the leader was lost); a survivor of a lost quorum not
// given the peers file keeps the configuration from before. The caller makes no
// other membership change meanwhile (the daemon's changes run one at a time).
func (n *Node) SpreadConfiguration(timeout time.Duration) error {
	if !n.IsLeader() {
		return fmt.Errorf("%w: %w", ErrNotLeader, ErrNotAppended)
	}
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	for _, s := range f.Configuration().Servers {
		if s.ID == n.id && s.Suffrage == raft.Voter {
			// A voter added again at its own address: the same configuration,
			// in a new entry.
			return changeError(settled(n.raft.AddVoter(s.ID, s.Address, 0, timeout), timeout+timeout/5))
		}
	}
	return fmt.Errorf("%w: this member is no voter of its configuration", ErrNotLeader)
}

// State is this member's Raft state, as raft names it in lower case: leader,
// follower, candidate or shutdown.
func (n *Node) State() string { return strings.ToLower(n.raft.State().String()) }

// Leader returns the current leader's id, if known.
func (n *Node) Leader() string {
	_, id := n.raft.LeaderWithID()
	return string(id)
}

// LastContact is when this follower last heard from the leader (zero on the leader
// or before any contact).
func (n *Node) LastContact() time.Time { return n.raft.LastContact() }

// AddNonvoter adds a server that receives the log but does not vote. Raft reports
// success without ever reaching the server, so a caller must confirm it replicates.
func (n *Node) AddNonvoter(id, addr string, timeout time.Duration) error {
	return changeError(settled(n.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(addr), 0, timeout), timeout+timeout/5))
}

// Promote makes a server a voter.
func (n *Node) Promote(id, addr string, timeout time.Duration) error {
	return changeError(settled(n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, timeout), timeout+timeout/5))
}

// Demote makes a voter a nonvoter: it keeps receiving the log and no longer counts
// towards a quorum.
func (n *Node) Demote(id string, timeout time.Duration) error {
	return changeError(settled(n.raft.DemoteVoter(raft.ServerID(id), 0, timeout), timeout+timeout/5))
}

// TransferLeadership has this node, the leader, hand leadership to the voter id at
// addr: it stops accepting commands, brings the target up to date and has it start an
// election at once (Raft's leadership transfer). It returns once the transfer
// completed or failed; an error says why (not the leader, a transfer already under
// way, the target not a voter or not answering in time).
func (n *Node) TransferLeadership(id, addr string) error {
	return n.raft.LeadershipTransferToServer(raft.ServerID(id), raft.ServerAddress(addr)).Error()
}

// ErrHandOver means a leader stopping on purpose could not hand its leadership to
// another voter in time: the others elect a leader once their election timeout
// passes, as after a crash.
var ErrHandOver = errors.New("leadership was not handed over")

// HandOver has this node, if it leads and another voter exists, hand leadership to
// the voter most up to date (Raft's leadership transfer), so that a control node
// stopped on purpose, as in a rolling restart, does not leave the others without a
// leader for an election timeout (2 to 4 s by default) before they notice. It
// reports whether leadership was handed over; ErrHandOver when the transfer failed
// or did not complete within limit (raft's own bound is the election timeout).
func (n *Node) HandOver(limit time.Duration) (bool, error) {
	if !n.IsLeader() {
		return false, nil
	}
	_, self := n.raft.LeaderWithID()
	members, err := n.Members()
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrHandOver, err)
	}
	if !slices.ContainsFunc(members, func(m Member) bool { return m.Voter && m.ID != string(self) }) {
		return false, nil
	}
	done := make(chan error, 1)
	go func() { done <- n.raft.LeadershipTransfer().Error() }()
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case err := <-done:
		if err != nil {
			return false, fmt.Errorf("%w: %w", ErrHandOver, err)
		}
		return true, nil
	case <-t.C:
		return false, fmt.Errorf("%w within %s", ErrHandOver, limit)
	}
}

// Remove takes a server out of the configuration.
func (n *Node) Remove(id string, timeout time.Duration) error {
	return changeError(settled(n.raft.RemoveServer(raft.ServerID(id), 0, timeout), timeout+timeout/5))
}

// Status is this member's view of Raft, for metrics.
type Status struct {
	Leader                          bool
	Term                            uint64
	LastIndex, CommitIndex, Applied uint64
	// LastContact is when a follower last heard from the leader (zero on the leader).
	LastContact time.Time
	// PeersNotMembers counts the Raft connections, in and out, closed because the
	// peer's pin is not allowed (Config.PeerAllowed); FailedHandshakes, those in that
	// did not complete a handshake with a leaf of the mesh CA.
	PeersNotMembers, FailedHandshakes uint64
	// LeaderChanges counts the leaders this member has learnt of since it opened
	// (observeLeaders).
	LeaderChanges uint64
}

// Status returns this member's view of Raft, from raft's own API (Applied is
// AppliedIndex: what the state machine here has applied).
func (n *Node) Status() Status {
	return Status{
		Leader: n.IsLeader(), Term: n.raft.CurrentTerm(),
		LastIndex: n.raft.LastIndex(), CommitIndex: n.raft.CommitIndex(), Applied: n.AppliedIndex(),
		LastContact:     n.raft.LastContact(),
		PeersNotMembers: n.stream.notMembers.Load(), FailedHandshakes: n.stream.failedHandshakes.Load(),
		LeaderChanges: n.leaders.Load(),
	}
}

// LogWriteError is the error of this member's last write to its Raft log when no
// write succeeded since, or ErrLogStalled while a write to it has been under way
// for LogWriteHung or more (a disk that does not answer), or nil. A member whose
// disk is full cannot append the entry an election starts with, so it does not
// lead while this stays set. Every view of the control plane that says whether a
// node's log can be written reads it (control status, heartbeats,
// mesh_raft_log_write_failing), and changes are refused before they are proposed.
// A commit slow for another reason (followers slow to answer) is not a log that
// cannot be written, and is not said to be one.
func (n *Node) LogWriteError() error {
	if p := n.guarded.writeErr.Load(); p != nil {
		return *p
	}
	if d := n.guarded.hungFor(); d >= LogWriteHung {
		return fmt.Errorf("%w: a write to it has been under way for %s (a disk that does not answer?)", ErrLogStalled, d.Round(time.Second))
	}
	return nil
}

// LogWriteHung is how long a write to the Raft log may be under way before the
// log counts as one that cannot be written (ErrLogStalled): far past the sync of
// any disk that answers.
const LogWriteHung = 10 * time.Second

// ErrLogStalled: a write to this member's Raft log has not returned (LogWriteError).
var ErrLogStalled = errors.New("a write to the Raft log does not return")

// SnapshotWriteError returns the error of the last snapshot this member wrote, or
// was sent and wrote down, when none succeeded since; nil otherwise.
func (n *Node) SnapshotWriteError() error {
	if t, ok := n.snaps.(*tidySnapshots); ok {
		return t.lastWriteError()
	}
	return nil
}

// AppliedIndex is the index up to which the state machine here has applied the log.
//
// Raft's own applied index counts the entries it has handed to the state machine's
// goroutine, which may still be applying them: read then, the state lacks them. So
// this is Raft's index only once the state machine has applied the last command up
// to it; until then it is the index of the last command the state machine applied.
// Entries the state machine never sees (no-ops, and what a restored snapshot
// covers) count as applied once Raft handed them over.
func (n *Node) AppliedIndex() uint64 {
	handed := n.raft.AppliedIndex()
	done := n.fsm.applied.Load()
	if done >= handed {
		return handed
	}
	if last := n.lastCommand(done, handed); last == 0 || last <= n.snapshotIndex() {
		return handed
	}
	return done
}

// lastCommand returns the index of the last command entry in (after, upTo] that
// the log store still holds, or 0 if there is none.
func (n *Node) lastCommand(after, upTo uint64) uint64 {
	if first, err := n.store.FirstIndex(); err == nil && first > 0 {
		after = max(after, first-1)
	}
	var l raft.Log
	for i := upTo; i > after; i-- {
		if err := n.store.GetLog(i, &l); err != nil {
			return 0 // compacted meanwhile: a snapshot covers it
		}
		if l.Type == raft.LogCommand {
			return i
		}
	}
	return 0
}

// snapshotIndex is the index of the newest snapshot in the store, or 0. The state
// machine here holds everything up to it: it either took the snapshot or restored
// from it, and Raft restores one (at start, or sent by the leader) before it hands
// over any entry after it. Raft's own figure (Stats) would wait on its main loop.
func (n *Node) snapshotIndex() uint64 {
	metas, err := n.snaps.List()
	if err != nil || len(metas) == 0 {
		return 0
	}
	return metas[0].Index
}

// guardedStore is the bolt store as Raft's log and stable store, closed before the
// bolt store so that a heartbeat still being handled after Shutdown cannot crash
// the process. hashicorp/raft handles heartbeats on the transport's connection
// goroutines, which neither Shutdown nor the transport's Close waits for
// (hashicorp/raft#717); such a heartbeat may save a term or hand committed entries
// to the state machine, and raft panics when the store fails it ("failed to save
// current term: database not open": `meshctl join` crashed that way after it had
// succeeded). close waits for the calls under way. A call after it touches
// nothing and never returns, since any answer would be a failure raft panics on
// or a success that is not true: only such a heartbeat goroutine can make one
// (Shutdown stopped every other user of the store), and nothing waits for it.
type guardedStore struct {
	inner  *raftboltdb.BoltStore
	mu     sync.RWMutex
	closed bool
	// writeErr is the error of the last log write when none succeeded since
	// (nil otherwise): a full disk, which raft only logs, and which keeps a node
	// from leading, as every election appends an entry.
	writeErr atomic.Pointer[error]
	// termNotRecorded is Config.TermNotRecorded.
	termNotRecorded func(error)
	// writes counts the log writes under way, since writesSince (hungFor).
	wmu         sync.Mutex
	writes      int
	writesSince time.Time
}

// noteWrite records how a log write ended.
func (s *guardedStore) noteWrite(err error) {
	if err == nil {
		if s.writeErr.Load() != nil {
			s.writeErr.Store(nil)
		}
		return
	}
	s.writeErr.Store(&err)
}

// writing records a log write under way until the function it returns is called.
func (s *guardedStore) writing() (done func()) {
	s.wmu.Lock()
	if s.writes == 0 {
		s.writesSince = time.Now()
	}
	s.writes++
	s.wmu.Unlock()
	return func() {
		s.wmu.Lock()
		s.writes--
		s.wmu.Unlock()
	}
}

// hungFor is how long the log writes under way have been, 0 when none is.
func (s *guardedStore) hungFor() time.Duration {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.writes == 0 {
		return 0
	}
	return time.Since(s.writesSince)
}

// enter admits a call, or parks the goroutine of one made after close.
func (s *guardedStore) enter() {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		select {} // see guardedStore
	}
}

func (s *guardedStore) leave() { s.mu.RUnlock() }

// close waits for the calls under way and parks every later one.
func (s *guardedStore) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

// FirstIndex implements raft.LogStore.
func (s *guardedStore) FirstIndex() (uint64, error) {
	s.enter()
	defer s.leave()
	return s.inner.FirstIndex()
}

// LastIndex implements raft.LogStore.
func (s *guardedStore) LastIndex() (uint64, error) {
	s.enter()
	defer s.leave()
	return s.inner.LastIndex()
}

// GetLog implements raft.LogStore.
func (s *guardedStore) GetLog(index uint64, l *raft.Log) error {
	s.enter()
	defer s.leave()
	return s.inner.GetLog(index, l)
}

// StoreLog implements raft.LogStore.
func (s *guardedStore) StoreLog(l *raft.Log) error {
	s.enter()
	defer s.leave()
	defer s.writing()()
	err := s.inner.StoreLog(l)
	s.noteWrite(err)
	return err
}

// StoreLogs implements raft.LogStore.
func (s *guardedStore) StoreLogs(logs []*raft.Log) error {
	s.enter()
	defer s.leave()
	defer s.writing()()
	err := s.inner.StoreLogs(logs)
	s.noteWrite(err)
	return err
}

// DeleteRange implements raft.LogStore.
func (s *guardedStore) DeleteRange(lo, hi uint64) error {
	s.enter()
	defer s.leave()
	return s.inner.DeleteRange(lo, hi)
}

// Set implements raft.StableStore.
func (s *guardedStore) Set(key, val []byte) error {
	s.enter()
	err := s.inner.Set(key, val)
	s.leave()
	s.stableFailed(err)
	return err
}

// SetUint64 implements raft.StableStore.
func (s *guardedStore) SetUint64(key []byte, val uint64) error {
	s.enter()
	err := s.inner.SetUint64(key, val)
	s.leave()
	s.stableFailed(err)
	return err
}

// stableFailed hands a failed write of Raft's term or vote to termNotRecorded, which
// Raft panics after (Config.TermNotRecorded); outside enter and leave, so that a
// Close waiting on the store does not wait on it.
func (s *guardedStore) stableFailed(err error) {
	if err != nil && s.termNotRecorded != nil {
		s.termNotRecorded(err)
	}
}

// Get implements raft.StableStore.
func (s *guardedStore) Get(key []byte) ([]byte, error) {
	s.enter()
	defer s.leave()
	return s.inner.Get(key)
}

// GetUint64 implements raft.StableStore.
func (s *guardedStore) GetUint64(key []byte) (uint64, error) {
	s.enter()
	defer s.leave()
	return s.inner.GetUint64(key)
}

// appliedFSM is the state machine Raft drives, recording the index of the last
// entry it took: a command it applied or a configuration change (Raft hands it
// both, in log order). Embedding hides raft.BatchingFSM, which the control plane's
// state machine does not implement; one that did would need it passed on here.
type appliedFSM struct {
	raft.FSM
	applied atomic.Uint64
	// snaps and raft, once set, let Snapshot refuse a snapshot of what the newest
	// one holds already.
	snaps raft.SnapshotStore
	raft  atomic.Pointer[raft.Raft]
}

// Snapshot implements raft.FSM. It answers raft.ErrNothingNewToSnapshot when the
// newest snapshot is of the index applied: after a follower installed its leader's
// snapshot, Raft's check compares the log's last index with the snapshot's and wraps
// around when the log is shorter (hashicorp/raft snapshot.go, shouldSnapshot), so an
// idle follower wrote the same state again at every interval, a full write and fsync
// each, and the copies pushed the older, different snapshots out of those kept.
func (f *appliedFSM) Snapshot() (raft.FSMSnapshot, error) {
	if r := f.raft.Load(); r != nil && f.snaps != nil {
		if metas, err := f.snaps.List(); err == nil && len(metas) > 0 && metas[0].Index >= r.AppliedIndex() {
			return nil, raft.ErrNothingNewToSnapshot
		}
	}
	return f.FSM.Snapshot()
}

// Apply implements raft.FSM.
func (f *appliedFSM) Apply(l *raft.Log) any {
	res := f.FSM.Apply(l)
	f.applied.Store(l.Index)
	return res
}

// StoreConfiguration implements raft.ConfigurationStore. The state keeps no Raft
// configuration of its own, but Raft counts a configuration entry as taken by the
// state machine only when it implements this: without it, after a membership
// change (a join, a removal) Raft refused every snapshot ("wait until the
// configuration entry at N has been applied") until a command followed.
func (f *appliedFSM) StoreConfiguration(index uint64, _ raft.Configuration) {
	f.applied.Store(index)
}

// PeersFile is the manual recovery file: when it exists in the Raft directory at start,
// the node rewrites its configuration to the servers it lists, the way out of a lost
// quorum (docs/operations.md). It is renamed once applied.
const PeersFile = "peers.json"

// maxPeersFile bounds the peers file: a server is a line of about 70 bytes, and a
// mesh has a handful of control nodes. A larger file is refused before it is read.
const maxPeersFile = 64 << 10

// ErrPeersFile means the peers file is there but cannot be used: too large, not
// JSON, not a list of servers, or one that leaves this node out. Nothing is
// recovered and the file stays as it is.
var ErrPeersFile = errors.New("unusable peers file")

// noVoter reports whether the peers file's data is a list of servers in which
// every one is a nonvoter. A file it cannot read as such a list is left to
// raft.ReadConfigJSON to refuse.
func noVoter(data []byte) bool {
	var servers []struct {
		NonVoter bool `json:"non_voter"`
	}
	if json.Unmarshal(data, &servers) != nil || len(servers) == 0 {
		return false
	}
	for _, s := range servers {
		if !s.NonVoter {
			return false
		}
	}
	return true
}

func recoverFromPeersFile(cfg Config, rc *raft.Config, store *raftboltdb.BoltStore, snaps raft.SnapshotStore, trans raft.Transport, log *slog.Logger) error {
	path := filepath.Join(cfg.Dir, PeersFile)
	addr := cfg.Advertise
	if addr == "" {
		addr = cfg.Bind
	}
	conf, ok, err := readPeersFile(cfg.Dir, cfg.ID, addr)
	if err != nil || !ok {
		return err
	}
	if cfg.EmptyFSM == nil {
		return fmt.Errorf("%s: this member cannot recover its Raft configuration (no empty state machine to replay the log into)", path)
	}
	// RecoverCluster replays the log into a scratch state machine to compute the new
	// snapshot; the real one is restored from it when Raft starts.
	if err := raft.RecoverCluster(rc, cfg.EmptyFSM(), store, store, snaps, trans, conf); err != nil {
		return fmt.Errorf("recover the Raft configuration from %s: %w", path, err)
	}
	if err := os.Rename(path, path+".applied"); err != nil {
		return err
	}
	// Flushed: a rename a power cut lost (the store's own flushes need not commit
	// raft/'s names) ran the recovery again at the next start, with the old list of
	// servers, over a membership changed since.
	if err := atomicfile.SyncDir(cfg.Dir); err != nil {
		return fmt.Errorf("recovered the Raft configuration from %s and renamed it, but flushing %s: %w", path, cfg.Dir, err)
	}
	log.Warn("Raft configuration recovered from the peers file", "file", path, "servers", len(conf.Servers))
	return nil
}

// readPeersFile reads the peers file in dir, when there is one (ok false: there is
// none), and refuses one a recovery cannot use (ErrPeersFile): too large, no list
// of servers, no voter in it, member id not among them, or listed at another
// address than addr, its own Raft address (not checked when addr is "").
func readPeersFile(dir, id, addr string) (conf raft.Configuration, ok bool, err error) {
	path := filepath.Join(dir, PeersFile)
	// Read as a regular file first, without waiting: a named pipe at its name (in
	// a copy `meshctl check` looks at, or put there by hand) held the reader until
	// a writer came, for good (a review's run).
	data, err := readfile.Regular(path, maxPeersFile)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return conf, false, nil
	case errors.Is(err, readfile.ErrTooLarge):
		return conf, false, fmt.Errorf("%w: %s is more than a list of a mesh's control nodes ever takes (%d bytes at most)", ErrPeersFile, path, maxPeersFile)
	case errors.Is(err, readfile.ErrNotRegular):
		return conf, false, fmt.Errorf("%w: %v: write the peers file as a file (docs/operations.md, \"Recovering from lost quorum\")", ErrPeersFile, err)
	case err != nil:
		return conf, false, fmt.Errorf("%w: %s: %w", ErrPeersFile, path, err)
	}
	if noVoter(data) {
		// hashicorp/raft's own words are "need at least one voter in
		// configuration": a survivor that was a nonvoter, written as it was.
		return conf, false, fmt.Errorf("%w: %s lists no voter (every server is \"non_voter\": true), and a configuration needs one: write the most up-to-date survivor "+
			"(the highest APPLIED INDEX in meshctl control status) \"non_voter\": false, whatever it was before (docs/operations.md, \"Recovering from lost quorum\")",
			ErrPeersFile, path)
	}
	conf, err = raft.ReadConfigJSON(path)
	if err != nil {
		return conf, false, fmt.Errorf("%w: %s: %w (expected [{\"id\":\"cp-2\",\"address\":\"10.0.0.2:7301\",\"non_voter\":false}])", ErrPeersFile, path, err)
	}
	i := slices.IndexFunc(conf.Servers, func(s raft.Server) bool { return string(s.ID) == id })
	if i < 0 {
		return conf, false, fmt.Errorf("%w: %s does not list this node (%s); a node only recovers into a configuration it belongs to", ErrPeersFile, path, id)
	}
	// This node's own Raft address is known (mesh.json's): one written otherwise (its
	// broker's port, a typo) recovered and served alone, and the other members, once
	// joined, dialled the wrong port for good after its next restart.
	if got := string(conf.Servers[i].Address); addr != "" && !sameAddress(got, addr) {
		return conf, false, fmt.Errorf("%w: %s gives this node (%s) the Raft address %s, but it listens for Raft on %s (mesh.json): write its Raft address, as `meshctl control status --json` gives it in members (docs/operations.md, \"Recovering from lost quorum\")",
			ErrPeersFile, path, id, got, addr)
	}
	if addr != "" {
		// Recorded as mesh.json has it ("[0:0::1]:7301", "[::ffff:10.0.0.1]:7301" or
		// a port's leading zero would otherwise become this node's address in the
		// recovered configuration, in a form no token or certificate check writes).
		conf.Servers[i].Address = raft.ServerAddress(addr)
	}
	// Two servers at one address, however written ("10.0.0.1:07301" beside
	// "10.0.0.1:7301", or this node's own written otherwise beside another's):
	// the rewrite above made them one string, which raft.RecoverCluster refused
	// at serve's start ("found duplicate address") after `meshctl check` had
	// called the file usable (FuzzReadPeersFile).
	seen := make(map[string]raft.ServerID, len(conf.Servers))
	for _, s := range conf.Servers {
		key := addressKey(string(s.Address))
		if other, dup := seen[key]; dup {
			return conf, false, fmt.Errorf("%w: %s lists %s and %s at one address (%s): give each control node its own Raft address, as `meshctl control status --json` gives it in members (docs/operations.md, \"Recovering from lost quorum\")",
				ErrPeersFile, path, other, s.ID, s.Address)
		}
		seen[key] = s.ID
	}
	return conf, true, nil
}

// addressKey is one spelling of an ip:port, as sameAddress judges them (any other
// address as it is written).
func addressKey(a string) string {
	x, err := netip.ParseAddrPort(a)
	if err != nil {
		return a
	}
	return netip.AddrPortFrom(x.Addr().Unmap(), x.Port()).String()
}

// sameAddress reports whether a and b name one ip:port, however written ("[::1]:7301"
// and "[0:0::1]:7301").
func sameAddress(a, b string) bool { return addressKey(a) == addressKey(b) }
