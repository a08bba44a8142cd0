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
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"mesh/controlplane/state"
)

// Timeouts tunes Raft for the machine it runs on. The defaults are twice
// hashicorp/raft's, because small, noisy machines (2 cores, shared) miss 1 s
// heartbeats under load and start needless elections.
type Timeouts struct {
	Heartbeat   time.Duration
	Election    time.Duration
	LeaderLease time.Duration
	Commit      time.Duration
	// SnapshotInterval and SnapshotThreshold set how often the state is
	// snapshotted and the log compacted; zero means 2 minutes and 2048 entries.
	SnapshotInterval  time.Duration
	SnapshotThreshold uint64
	// Handshake bounds a TLS handshake on the Raft port; zero means HandshakeTimeout.
	Handshake time.Duration
}

// DefaultTimeouts suit small, noisy machines.
func DefaultTimeouts() Timeouts {
	return Timeouts{Heartbeat: 2 * time.Second, Election: 2 * time.Second, LeaderLease: time.Second, Commit: 50 * time.Millisecond}
}

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
	TLS      *tls.Config
	FSM      *state.FSM
	Timeouts Timeouts
	Logger   *slog.Logger
	// Now stamps the commands this member proposes; nil means time.Now.
	Now func() time.Time
}

// Node is a running Raft member.
type Node struct {
	now    func() time.Time
	Raft   *raft.Raft
	FSM    *state.FSM
	store  *raftboltdb.BoltStore
	trans  *raft.NetworkTransport
	leader chan bool
	log    *slog.Logger
}

// ErrNotLeader means a write was proposed on a control node that is not the leader.
var ErrNotLeader = errors.New("this control node is not the Raft leader")

func raftConfig(cfg Config) *raft.Config {
	t := cfg.Timeouts
	if t.Heartbeat == 0 {
		d := DefaultTimeouts()
		t.Heartbeat, t.Election, t.LeaderLease, t.Commit = d.Heartbeat, d.Election, d.LeaderLease, d.Commit
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.HeartbeatTimeout = t.Heartbeat
	rc.ElectionTimeout = t.Election
	rc.LeaderLeaseTimeout = t.LeaderLease
	rc.CommitTimeout = t.Commit
	rc.SnapshotThreshold = 2048
	rc.SnapshotInterval = 2 * time.Minute
	if cfg.Timeouts.SnapshotThreshold > 0 {
		rc.SnapshotThreshold = cfg.Timeouts.SnapshotThreshold
		rc.TrailingLogs = min(rc.TrailingLogs, cfg.Timeouts.SnapshotThreshold)
	}
	if cfg.Timeouts.SnapshotInterval > 0 {
		rc.SnapshotInterval = cfg.Timeouts.SnapshotInterval
	}
	rc.TrailingLogs = 4096
	rc.Logger = hclogger(cfg.Logger)
	return rc
}

func openStores(dir string, log *slog.Logger) (*raftboltdb.BoltStore, raft.SnapshotStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, err
	}
	store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
	if err != nil {
		return nil, nil, fmt.Errorf("open raft log %s: %w", filepath.Join(dir, "raft.db"), err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 3, hclogger(log))
	if err != nil {
		store.Close()
		return nil, nil, fmt.Errorf("open raft snapshots: %w", err)
	}
	return store, snaps, nil
}

// Bootstrap makes dir a one-voter cluster with this node as its only member. It
// reports done=false, with no error, if the stores already hold a cluster: bootstrap
// is then a resume, never a second cluster.
func Bootstrap(cfg Config) (done bool, err error) {
	store, snaps, err := openStores(cfg.Dir, cfg.Logger)
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
	err = raft.BootstrapCluster(raftConfig(cfg), store, store, snaps, trans, conf)
	if errors.Is(err, raft.ErrCantBootstrap) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("bootstrap raft: %w", err)
	}
	return true, nil
}

// HasState reports whether dir holds a Raft cluster's state.
func HasState(dir string) (bool, error) {
	if _, err := os.Stat(filepath.Join(dir, "raft.db")); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	store, snaps, err := openStores(dir, slog.New(slog.DiscardHandler))
	if err != nil {
		return false, err
	}
	defer store.Close()
	return raft.HasExistingState(store, store, snaps)
}

// Open starts the Raft member on its stores and transport.
func Open(cfg Config) (*Node, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	store, snaps, err := openStores(cfg.Dir, log)
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
	stream, err := newTLSStream(cfg.Bind, adv, cfg.TLS, log, cfg.Timeouts.Handshake)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("raft listen on %s: %w", cfg.Bind, err)
	}
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  stream,
		MaxPool: 3,
		Timeout: 10 * time.Second,
		Logger:  hclogger(log),
	})
	rc := raftConfig(cfg)
	if err := recoverFromPeersFile(cfg, rc, store, snaps, trans, log); err != nil {
		trans.Close()
		store.Close()
		return nil, err
	}
	leader := make(chan bool, 16)
	rc.NotifyCh = leader
	r, err := raft.NewRaft(rc, cfg.FSM, store, store, snaps, trans)
	if err != nil {
		trans.Close()
		store.Close()
		return nil, fmt.Errorf("start raft: %w", err)
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	return &Node{now: now, Raft: r, FSM: cfg.FSM, store: store, trans: trans, leader: leader, log: log}, nil
}

// LeaderChanges delivers true when this node becomes leader and false when it stops
// being leader.
func (n *Node) LeaderChanges() <-chan bool { return n.leader }

// IsLeader reports whether this node is the leader now.
func (n *Node) IsLeader() bool { return n.Raft.State() == raft.Leader }

// WaitReady blocks until this node is leader and has applied every entry committed
// before it became leader (a barrier), or until ctx ends. A control node serves
// nothing before its state is current.
func (n *Node) WaitReady(ctx context.Context) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		if n.IsLeader() {
			if err := n.Raft.Barrier(10 * time.Second).Error(); err == nil {
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

// ApplyIndex is Apply for commands whose log index matters (probe entries).
func (n *Node) ApplyIndex(c state.Command, timeout time.Duration) (uint64, error) {
	res, index, err := n.apply(c, timeout)
	if err == nil && res.Err != nil {
		err = res.Err
	}
	return index, err
}

// Apply proposes a command and waits for it to be applied, returning the state
// machine's result. The command's time is stamped here, on the leader.
func (n *Node) Apply(c state.Command, timeout time.Duration) (state.Result, error) {
	res, _, err := n.apply(c, timeout)
	return res, err
}

func (n *Node) apply(c state.Command, timeout time.Duration) (state.Result, uint64, error) {
	if !n.IsLeader() {
		return state.Result{}, 0, ErrNotLeader
	}
	if c.At.IsZero() {
		c.At = n.now().UTC()
	}
	data, err := json.Marshal(c)
	if err != nil {
		return state.Result{}, 0, fmt.Errorf("encode command: %w", err)
	}
	f := n.Raft.Apply(data, timeout)
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return state.Result{}, 0, fmt.Errorf("%w: %v", ErrNotLeader, err)
		}
		return state.Result{}, 0, fmt.Errorf("commit %s: %w", c.Op, err)
	}
	res, _ := f.Response().(state.Result)
	return res, f.Index(), nil
}

// Close shuts Raft down and closes the stores.
func (n *Node) Close() error {
	err := n.Raft.Shutdown().Error()
	n.trans.Close()
	if cerr := n.store.Close(); err == nil {
		err = cerr
	}
	return err
}

// hclogger sends hashicorp/raft's log lines to slog, at warning level and above: Raft
// is chatty at info, and what matters (elections, failed appends) is a warning.
func hclogger(log *slog.Logger) hclog.Logger {
	if log == nil {
		log = slog.Default()
	}
	return hclog.New(&hclog.LoggerOptions{
		Name:   "raft",
		Level:  hclog.Warn,
		Output: slogWriter{log.With("component", "raft")},
	})
}

type slogWriter struct{ log *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	switch {
	case strings.Contains(line, "[ERROR]"):
		w.log.Error(line)
	case strings.Contains(line, "[WARN]"):
		w.log.Warn(line)
	default:
		w.log.Info(line)
	}
	return len(p), nil
}

var _ io.Writer = slogWriter{}

// WaitFollowing blocks until this node knows a leader and has applied everything it
// knows to be committed, or until ctx ends. A follower serves its broker only then, so
// its authentication hook never decides from a stale roster.
func (n *Node) WaitFollowing(ctx context.Context) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		if n.IsLeader() {
			return n.WaitReady(ctx)
		}
		if addr, _ := n.Raft.LeaderWithID(); addr != "" {
			commit, err := strconv.ParseUint(n.Raft.Stats()["commit_index"], 10, 64)
			if err == nil && commit > 0 && n.Raft.AppliedIndex() >= commit {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for this control node to catch up with the leader: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// Member is one server of the Raft configuration.
type Member struct {
	ID      string
	Address string
	Voter   bool
}

// Members returns the current Raft configuration.
func (n *Node) Members() ([]Member, error) {
	f := n.Raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	var out []Member
	for _, s := range f.Configuration().Servers {
		out = append(out, Member{ID: string(s.ID), Address: string(s.Address), Voter: s.Suffrage == raft.Voter})
	}
	return out, nil
}

// Leader returns the current leader's id, if known.
func (n *Node) Leader() string {
	_, id := n.Raft.LeaderWithID()
	return string(id)
}

// AddNonvoter adds a server that receives the log but does not vote. Raft reports
// success without ever reaching the server, so a caller must confirm it replicates.
func (n *Node) AddNonvoter(id, addr string, timeout time.Duration) error {
	return n.Raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(addr), 0, timeout).Error()
}

// Promote makes a server a voter.
func (n *Node) Promote(id, addr string, timeout time.Duration) error {
	return n.Raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, timeout).Error()
}

// Remove takes a server out of the configuration.
func (n *Node) Remove(id string, timeout time.Duration) error {
	return n.Raft.RemoveServer(raft.ServerID(id), 0, timeout).Error()
}

// AppliedIndex is the index of the last entry applied to the state machine here.
func (n *Node) AppliedIndex() uint64 { return n.Raft.AppliedIndex() }

// PeersFile is the manual recovery file: when it exists in the Raft directory at start,
// the node rewrites its configuration to the servers it lists, the way out of a lost
// quorum (docs/operations.md). It is renamed once applied.
const PeersFile = "peers.json"

func recoverFromPeersFile(cfg Config, rc *raft.Config, store *raftboltdb.BoltStore, snaps raft.SnapshotStore, trans raft.Transport, log *slog.Logger) error {
	path := filepath.Join(cfg.Dir, PeersFile)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	conf, err := raft.ReadConfigJSON(path)
	if err != nil {
		return fmt.Errorf("%s: %w (expected [{\"id\":\"cp-2\",\"address\":\"10.0.0.2:7301\",\"non_voter\":false}])", path, err)
	}
	if !slices.ContainsFunc(conf.Servers, func(s raft.Server) bool { return string(s.ID) == cfg.ID }) {
		return fmt.Errorf("%s does not list this node (%s); a node only recovers into a configuration it belongs to", path, cfg.ID)
	}
	// RecoverCluster replays the log into a scratch state machine to compute the new
	// snapshot; the real one is restored from it when Raft starts.
	if err := raft.RecoverCluster(rc, state.NewFSM(), store, store, snaps, trans, conf); err != nil {
		return fmt.Errorf("recover the Raft configuration from %s: %w", path, err)
	}
	if err := os.Rename(path, path+".applied"); err != nil {
		return err
	}
	log.Warn("Raft configuration recovered from the peers file", "file", path, "servers", len(conf.Servers))
	return nil
}
