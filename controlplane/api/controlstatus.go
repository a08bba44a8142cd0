package api

import "time"

// ControlStatusSubject is where every control node answers for itself, leader or
// not, from what it holds: its Raft configuration and role, the leader it follows,
// and the control nodes it hears. The operator API (AdminPrefix) is served by the
// leader alone, so with the quorum lost nothing answers there; this is how an
// operator sees then which control nodes run and which voters are missing
// (`meshctl control status`). It is not under AdminPrefix, where the leader's
// subscription would take its requests too.
const ControlStatusSubject = "mesh.controlstatus"

// OpControlStatus names a request to ControlStatusSubject in its AdminRequest
// envelope: the request is decoded as strictly as the operator API's.
const OpControlStatus = "control.status"

// ControlStatusRequest asks a control node for its own view. It has no arguments.
type ControlStatusRequest struct{}

// Raft states a control node reports of itself in a ControlStatus.
const (
	RaftStateLeader    = "leader"
	RaftStateFollower  = "follower"
	RaftStateCandidate = "candidate"
	RaftStateShutdown  = "shutdown"
)

// ControlStatus is one control node's view of the control plane, from its own
// replicated state (which may be behind) and its own Raft.
type ControlStatus struct {
	Mesh string `json:"mesh"`
	Node string `json:"node"`
	// Version is the version of the meshctl serving this node (`meshctl version`);
	// versions before it send none. During a rolling upgrade it tells which control
	// nodes run the new build.
	Version string `json:"version,omitempty"`
	// Raft is this node's Raft state: leader, follower or candidate (electing:
	// it hears no leader).
	Raft string `json:"raft_state"`
	// Leader is the leader this node follows ("": none known).
	Leader string `json:"leader,omitempty"`
	Term   uint64 `json:"term"`
	// LastContact is when this node last heard from a leader (zero: on the leader,
	// or never since it started).
	LastContact  time.Time `json:"last_contact,omitzero"`
	CommitIndex  uint64    `json:"commit_index"`
	AppliedIndex uint64    `json:"applied_index"`
	// LogWriteError is why this node's last write to its Raft log failed, when
	// none succeeded since (a full disk): such a node cannot lead.
	LogWriteError string `json:"log_write_error,omitempty"`
	// Members is the Raft configuration as this node holds it.
	Members []RaftMember `json:"members"`
	// Control is the control nodes as this node sees them: its replicated state,
	// and the heartbeats it heard.
	Control []ControlView `json:"control"`
	// At is this node's clock as it answered (versions before it send none): the
	// clock LastContact is by, and how long ago that was is counted from it.
	At time.Time `json:"at,omitzero"`
	// RequireSignedChanges says whether this node serves with
	// --require-signed-changes (nil from versions before it, which carry out
	// unsigned changes): a per-process flag, and any node may lead, so `meshctl
	// control status` names nodes that differ (a review: a failover to a node
	// without it let unsigned changes in again without a word).
	RequireSignedChanges *bool `json:"require_signed_changes,omitempty"`
}

// RaftMember is one server of a Raft configuration.
type RaftMember struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	Voter   bool   `json:"voter"`
}
