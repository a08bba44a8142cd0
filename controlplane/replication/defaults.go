package replication

import (
	"context"
	"log/slog"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"mesh/logging"
)

// The defaults of a Raft member, all of them here. The timeouts are twice
// hashicorp/raft's, because small, noisy machines (2 cores, shared) miss 1 s
// heartbeats under load and start needless elections.
const (
	defaultHeartbeat = 2 * time.Second
	defaultCommit    = 50 * time.Millisecond
	// The state is snapshotted, and the log compacted, when this many entries have
	// accumulated since the last snapshot, checked this often.
	defaultSnapshotThreshold = 2048
	defaultSnapshotInterval  = 2 * time.Minute
	// maxTrailingLogs is the most entries kept behind a snapshot, for a follower that
	// lags to catch up from the log rather than a snapshot. Never more than the
	// threshold, so that a snapshot compacts the log.
	maxTrailingLogs = 4096
	// snapshotsRetained is how many snapshots stay on disk.
	snapshotsRetained = 3

	// HandshakeTimeout bounds a TLS handshake on the Raft port, in both directions, so
	// a peer that connects and says nothing cannot hold a goroutine.
	HandshakeTimeout = 5 * time.Second
	// transportTimeout bounds one Raft RPC on a connection; transportPool is how many
	// idle connections are kept per peer.
	transportTimeout = 10 * time.Second
	transportPool    = 3

	// barrierTimeout bounds the wait for a barrier to enter the log.
	barrierTimeout = 10 * time.Second
	// pollInterval is how often the waits for leadership or for catching up look again.
	pollInterval = 50 * time.Millisecond
)

// Timeouts tunes Raft for the machine it runs on. A zero field takes its default
// (DefaultTimeouts): Election defaults to Heartbeat and LeaderLease to half of it, so
// setting Heartbeat alone is consistent.
type Timeouts struct {
	Heartbeat   time.Duration
	Election    time.Duration
	LeaderLease time.Duration
	Commit      time.Duration
	// SnapshotInterval and SnapshotThreshold set how often the state is
	// snapshotted and the log compacted.
	SnapshotInterval  time.Duration
	SnapshotThreshold uint64
	// Handshake bounds a TLS handshake on the Raft port.
	Handshake time.Duration
}

// DefaultTimeouts suit small, noisy machines.
func DefaultTimeouts() Timeouts { return Timeouts{}.withDefaults() }

// FirstElectionWithin is how long after a cold start of every voter the first
// election may take to be held: hashicorp/raft's follower stands only after a
// random 1 to 2 election timeouts without a leader, and a split vote starts
// another such wait.
func (t Timeouts) FirstElectionWithin() time.Duration {
	t = t.withDefaults()
	return 2 * 2 * max(t.Heartbeat, t.Election)
}

func (t Timeouts) withDefaults() Timeouts {
	if t.Heartbeat == 0 {
		t.Heartbeat = defaultHeartbeat
	}
	if t.Election == 0 {
		t.Election = t.Heartbeat
	}
	if t.LeaderLease == 0 {
		t.LeaderLease = t.Heartbeat / 2
	}
	if t.Commit == 0 {
		t.Commit = defaultCommit
	}
	if t.SnapshotInterval == 0 {
		t.SnapshotInterval = defaultSnapshotInterval
	}
	if t.SnapshotThreshold == 0 {
		t.SnapshotThreshold = defaultSnapshotThreshold
	}
	if t.Handshake == 0 {
		t.Handshake = HandshakeTimeout
	}
	return t
}

// raftConfig is hashicorp/raft's configuration for this member: raft's defaults, with
// ours over them.
func raftConfig(cfg Config, log hclog.Logger) *raft.Config {
	t := cfg.Timeouts.withDefaults()
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.HeartbeatTimeout = t.Heartbeat
	rc.ElectionTimeout = t.Election
	rc.LeaderLeaseTimeout = t.LeaderLease
	rc.CommitTimeout = t.Commit
	rc.SnapshotThreshold = t.SnapshotThreshold
	rc.SnapshotInterval = t.SnapshotInterval
	rc.TrailingLogs = min(maxTrailingLogs, t.SnapshotThreshold)
	rc.Logger = log
	return rc
}

// raftLogger is the hclog.Logger Raft, its transport and its snapshot store log
// through: component "raft", repeated warnings and errors bounded by repeats. Raft's
// info lines (every snapshot, every replication start) and debug lines are logged only
// when log is at debug; its warnings and errors always.
func raftLogger(log *slog.Logger, repeats *logging.Limiter) hclog.Logger {
	level := hclog.Warn
	if log.Enabled(context.Background(), slog.LevelDebug) {
		level = hclog.Debug
	}
	return newSlogger(log, "raft", level, repeats)
}

// orDefault is the logger a member logs to: slog's default when none is given.
func orDefault(log *slog.Logger) *slog.Logger {
	if log == nil {
		return slog.Default()
	}
	return log
}
