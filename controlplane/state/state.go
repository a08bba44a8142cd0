// Package state is the control plane's replicated state: the roster of nodes, the
// outstanding tokens, the declarations assigned to each node, and the signing keyring.
//
// It is the finite state machine under hashicorp/raft. Every change is a Command in the
// replicated log, and applying a command is deterministic: the time a command speaks of
// is carried in the command (stamped by the leader that proposed it), never read from
// the local clock, so every control node reaches the same state.
//
// Nothing secret is kept here in clear: tokens are stored as the hash of their secret,
// and the declaration signing key is not in the state at all.
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// ApplyRules is the revision of the rules by which this code applies commands. Raise it
// whenever a command's effect on the state changes, or a command or a field is added
// that older code would ignore or refuse: a control node on older rules applies such an
// entry otherwise, without an error, and its state, then its snapshots, differ from
// the others' for good. Control nodes announce it in their heartbeats, and the leader
// refuses what older rules would apply otherwise while a node on them serves.
// Such a command carries the rules it needs (Command.Rules): a node of this version
// or a later one, on older rules, stops at it (ErrNewerRules) instead of parting
// from the others, as a node put back to an older meshctl would.
//
// 1: the rules before they were announced. 2: a control token's identity sealed to
// the control nodes (CreateTokenCmd.SealedTo), which rules 1 refuse to record, so
// such a node never records the node the token admits either. 3: tokens follow their
// node (RulesTokensFollowNodes). 4: which tokens are pending is read from the token's
// record alone (RulesPendingByRecord). 5: a change carries its operator's request id,
// and the same id again is not carried out twice (RulesRequests). 6: a control node
// admitted is listed to hosts only once the leader has heard it serve
// (RulesBrokersWhenServing). 7: a token cancellation may name the tokens it
// cancels (RulesCancelByID). 8: a rotation may take the keyring past an epoch
// hosts report (RulesRotatePastReported). 9: a revocation may name the key it
// revokes (RulesRevokeByKey). 10: revoked nodes' records are forgotten
// (RulesForgetRevoked). 11: a label change carries the most labels a node may
// hold, checked as it applies (RulesLabelCap). 12: a rotation seals the new key to
// every control node, checked as it applies (RulesRotateSealedToAll). 13: operator
// credentials are recorded by name, and revoked (RulesOperators). 14: a name's
// credentials are renewed beside those it holds, and revoked one key at a time
// (RulesOperatorRenewal).
const ApplyRules = 14

// Revisions of the rules that changed how a command applies; a command that needs one
// is stamped with it (Command.Rules), and applied by the rules before it otherwise.
const (
	// RulesSealedTo records a control token's identity sealed to the control nodes.
	RulesSealedTo = 2
	// RulesTokensFollowNodes: a node has at most one pending token, and minting
	// another is refused (ErrTokenPending) unless it replaces the pending ones
	// (CreateTokenCmd.Replace), which it cancels; a revocation cancels, and lists,
	// the pending tokens of the nodes it revokes, and leaves those minted for a node
	// revoked earlier (the earlier rules deleted every unused token of every node a
	// revocation named, a replacement's too); labels of a revoked node are refused
	// (ErrNodeRevoked), as the machine enrolled next under its id takes its token's.
	RulesTokensFollowNodes = 3
	// RulesPendingByRecord: the tokens counted as a node's pending ones (the one
	// pending token a node may have, those a revocation cancels) are those unused,
	// not cancelled and unexpired (Token.StateAt), a token whose signing key was
	// retired since included. Rules 3 left those out by the
	// token's SigningKey, which a control node that applied the mint before it
	// recorded that field (or loaded a snapshot of such a node's) does not hold:
	// after a retirement, one node found the token pending and refused a mint, or
	// cancelled it in a revocation, that another carried out, and their states
	// parted for good.
	RulesPendingByRecord = 4
	// RulesRequests: a command carrying a request id (Command.Request) is recorded
	// under it (State.Requests) for RequestRetention, and a command carrying an id
	// already recorded changes nothing (Result.Repeated): meshctl sends a change
	// again, under its id, when the answer to it was lost. Older rules ignore the
	// id and would carry the change out twice.
	RulesRequests = 5
	// RulesBrokersWhenServing: a control node admitted by a command stamped with
	// these rules is recorded NeverServed (ControlNode), which leaves its broker out
	// of State.Brokers (the signed list hosts follow, what tokens carry, mesh.json)
	// and does not raise MembershipVersion; the leader's ControlServingCmd, once it
	// hears the node's `meshctl serve`, lists it and raises the version. Older rules
	// list a control node from its admission on, and skip ControlServingCmd: under
	// one membership version they would sign another list of brokers than this
	// version (decision 0035).
	RulesBrokersWhenServing = 6
	// RulesCancelByID: a CancelTokensCmd that names tokens (IDs) cancels those of
	// them still pending and nothing else: a token of the node minted after the
	// operator looked (another operator's `token --replace`, a mint between a
	// cancellation and its rerun) is left pending, and the result says so
	// (Result.StillPending), as it says which named tokens were pending no more
	// (Result.NotPending). A name that is no token of the node refuses the whole
	// command (ErrNoSuchToken). Older rules ignore IDs and cancel every token of
	// the node pending at the command's time, the one minted since included.
	RulesCancelByID = 7
	// RulesRotatePastReported: a RotateCmd stamped with these rules may install
	// any epoch above the current one, not only the next: hosts that accepted an
	// epoch the state no longer holds (a control plane restored from a copy older
	// than a rotation) refuse another keyring under it as a replay, and the
	// leader takes the rotation past the highest epoch they report. Older rules
	// refuse such a rotation.
	RulesRotatePastReported = 8
	// RulesRevokeByKey: a RevokeCmd that names its nodes' keys (Keys) revokes
	// nothing unless each named node holds the key named for it (ErrKeyMismatch):
	// `meshctl revoke --key` run again as a new machine enrolled under the revoked
	// id, between the leader's look at the state and the commit, refused instead of
	// revoking the new machine. Older rules ignore Keys: the leader then checks the
	// key only as it proposes.
	RulesRevokeByKey = 9
	// RulesForgetRevoked: a ForgetCmd replaces revoked nodes' records by
	// State.Forgotten, which an enrolment under a forgotten id continues the
	// versions of, a revocation answers as revoked already, and a label change
	// refuses (ErrNodeRevoked). Older rules know no such command.
	RulesForgetRevoked = 10
	// RulesLabelCap: a LabelCmd that carries Max changes nothing if it would leave
	// its node with more than Max labels (ErrTooManyLabels). The leader checks it
	// as it proposes too, but a change committed between that look and this one's
	// commit (another operator's, or one a new leader had pending) let a node past
	// the cap. Older rules ignore Max.
	RulesLabelCap = 11
	// RulesRotateSealedToAll: a RotateCmd whose new key is not sealed to every
	// active control node changes nothing (ErrRotationMissesNode). The leader seals
	// it to those it looked at; one admitted before the rotation committed (its
	// commit pending across a leader change, say) held no copy, and after the
	// retire no key of the keyring. Older rules apply such a rotation.
	RulesRotateSealedToAll = 12
	// RulesOperators: AddOperatorCmd records operator credentials issued by name
	// (State.Operators) and RevokeOperatorsCmd revokes them, refused at login from
	// then on. Older rules know neither command.
	RulesOperators = 13
	// RulesOperatorRenewal: an AddOperatorCmd with Renew records credentials
	// under a name that holds valid ones (MaxValidPerName in all), and a
	// RevokeOperatorsCmd with Keys revokes those keys of its name alone. Older
	// rules refuse the first (ErrOperatorExists) and revoke every key of the name
	// for the second.
	RulesOperatorRenewal = 14
)

// Roles a node can hold.
const (
	RoleWorker  = "worker"
	RoleControl = "control"
)

// State is the whole replicated state. Callers get copies, never the live maps.
type State struct {
	Mesh      string    `json:"mesh"`
	CreatedAt time.Time `json:"created_at"`
	// Keyring is the current set of trusted declaration signing keys.
	Keyring Keyring `json:"keyring"`
	// Keyrings holds every earlier signed keyring by epoch: the chain a host that
	// was away follows.
	Keyrings map[uint64]json.RawMessage `json:"keyrings,omitempty"`
	// SealedKeys holds, from a rotation until the next, the newest signing key sealed to each
	// control node's curve key (never in clear).
	SealedKeys map[string]SealedKey `json:"sealed_keys,omitempty"`
	// Tokens are indexed by the hex SHA-256 id of their secret.
	Tokens map[string]*Token `json:"tokens"`
	Nodes  map[string]*Node  `json:"nodes"`
	// Bodies holds each distinct declaration body once, by its hex digest.
	Bodies map[string]json.RawMessage `json:"bodies"`
	// RevokedKeys lists every node key the mesh has revoked, with its node id: a
	// revoked key stays refused even after its node id enrols again.
	RevokedKeys map[string]string `json:"revoked_keys"`
	// Forgotten holds, by id, what is kept of revoked nodes whose record was
	// forgotten, RevokedRetention or more after their revocation (ForgetCmd): the
	// id's last version, when it was revoked, and its last key when RevokedKeys
	// cannot tell it; about a tenth of a record's bytes (with its keys in
	// RevokedKeys, a fifth).
	Forgotten map[string]ForgottenNode `json:"forgotten,omitempty"`
	// RevokedOperators lists the operator credentials' public keys of removed control
	// nodes, with the node's id: they may read, never change, the mesh.
	RevokedOperators map[string]string `json:"revoked_operators,omitempty"`
	// Operators are the operator credentials issued by name (meshctl operator add),
	// by their public key: revoked ones are refused at login (RulesOperators).
	Operators map[string]*Operator `json:"operators,omitempty"`
	// AdminAccount is the public account nkey that issues operator credentials.
	AdminAccount string `json:"admin_account"`
	// ControlNodes are the members of the control plane, by id.
	ControlNodes map[string]*ControlNode `json:"control_nodes"`
	// CAHolder is the control node that holds the CA key: only it mints control
	// tokens and TLS identities.
	CAHolder string `json:"ca_holder"`
	// Validity is how long a declaration stays valid after it is signed.
	Validity time.Duration `json:"validity"`
	// MembershipVersion grows with every change of the control nodes (an
	// admission by RulesBrokersWhenServing excepted: it lists no broker; the node's
	// ControlServingCmd does): it versions the signed list of brokers hosts follow,
	// so one version never names two lists, and it orders what a lagging control
	// node learns of the members ahead of its state (decision 0015).
	MembershipVersion uint64 `json:"membership_version"`
	// Requests records, by request id, the changes operators asked for within
	// RequestRetention of the newest one (RulesRequests): a request sent again
	// because its answer was lost is recognised and not carried out twice.
	Requests map[string]RequestRecord `json:"requests,omitempty"`
	// Rules is the newest rules any entry that changed this state was stamped with
	// (Command.Rules). A control node whose ApplyRules is older stops at such an
	// entry in its log (FSM.Apply); it stops likewise at a snapshot holding it
	// (FSM.Restore), which it would otherwise take whole and read by its older
	// rules: a state another node built by newer ones. No rule reads it; a control
	// node from before it ignores it in snapshots, as it ignores the rules they need.
	Rules int `json:"rules,omitempty"`

	// byKey indexes Nodes by public key; derived, rebuilt on restore.
	byKey map[string]string
	// tokensOf indexes Tokens by node (token ids); derived, rebuilt on restore. A
	// mint looks for its node's pending tokens: a scan of every token, 10,000 during a
	// fleet's enrolment, made each mint 40 times slower under the state's lock.
	tokensOf map[string][]string
	// revokedOf indexes RevokedKeys by node id; derived, rebuilt on restore. A
	// revoked key's sync asks for its node's revocations, which otherwise read
	// every key the mesh ever revoked, at each request, under the read lock.
	revokedOf map[string][]string
	// purgeAt is when the first token record falls due for purging, or its sealed
	// identity for dropping (zero: not known, computed at the next command).
	// Derived: it spares every command a walk over every token.
	purgeAt time.Time
}

// Keyring is the declaration signing keyring: public keys only.
type Keyring struct {
	Epoch uint64   `json:"epoch"`
	Keys  []string `json:"keys"` // hex Ed25519 public keys
	// Envelope is the keyring signed by its keys (and by the keys it replaced), as
	// hosts receive it. Signing needs the private keys, so the leader signs and puts
	// the result in the command.
	Envelope json.RawMessage `json:"envelope"`
}

// Token is what the mesh remembers of a minted token. The secret itself is not here.
type Token struct {
	ID string `json:"id"` // hex SHA-256 of the secret (domain-separated)
	// ProofKey is the public half of the Ed25519 key the secret derives (hex): an
	// enrolling client proves the secret with it and never sends it. It proves
	// nothing to whoever reads the state. Empty for tokens minted before it.
	ProofKey  string            `json:"proof_key,omitempty"`
	Node      string            `json:"node"`
	Role      string            `json:"role"`
	Labels    map[string]string `json:"labels,omitempty"`
	CreatedAt time.Time         `json:"created_at"`
	Expiry    time.Time         `json:"expiry"`
	// Control tokens carry the addresses the node is admitted with and its TLS
	// identity and operator credentials, sealed under a key derived from the token
	// secret, then sealed again to each control node's curve key (SealedTo, keyed by
	// node id): the control node that admits the joiner opens its copy and hands over
	// what the token's secret opens. So neither the state nor the Raft log, which
	// keeps entries after the state drops them, opens with the token's text alone: a
	// control node's curve key is needed too, and that never leaves its data
	// directory. SealedSum is the hex SHA-256 of the identity as the minting meshctl
	// sealed it, which tells the same request sent again from another. Sealed holds
	// it as it was recorded before SealedTo (the token's secret alone opens it).
	// Both are dropped once the token has expired or was cancelled (purgeTokens).
	Control   *ControlAddrs             `json:"control,omitempty"`
	Sealed    []byte                    `json:"sealed,omitempty"`
	SealedTo  map[string]SealedIdentity `json:"sealed_to,omitempty"`
	SealedSum string                    `json:"sealed_sum,omitempty"`
	// UsedAt and UsedKey are set when the token enrolled a node with that key.
	UsedAt  time.Time `json:"used_at,omitzero"`
	UsedKey string    `json:"used_key,omitempty"`
	// CancelledAt is set when an operator cancelled the token before it was used.
	// The record stays, so that whoever presents it is told "cancelled".
	CancelledAt time.Time `json:"cancelled_at,omitzero"`
	// SigningKey is the signing key the token carries (hex): the keyring's newest
	// when the token was recorded. Once a retirement drops it from the keyring the
	// mesh refuses the token (token_stale_key), and ShownState says so. Empty for
	// tokens recorded before it, or by a control node older than it, and so it may
	// differ between control nodes: only what they show reads it, no rule of the
	// state (rules 3 did: RulesPendingByRecord).
	SigningKey string `json:"signing_key,omitempty"`
}

// SealedIdentity is a control token's sealed identity sealed again to one control
// node's curve key; Sealer is the public curve key it was sealed with, which opening
// it needs.
type SealedIdentity struct {
	Blob   []byte `json:"blob"`
	Sealer string `json:"sealer"`
}

// HoldsIdentity reports whether the token still holds a sealed identity.
func (t *Token) HoldsIdentity() bool { return len(t.Sealed) > 0 || len(t.SealedTo) > 0 }

// ShortID is the first 12 hex digits of the token's id: what operators are shown, enough
// to tell two tokens of one node apart and useless for enrolling.
func (t *Token) ShortID() string { return t.ID[:min(12, len(t.ID))] }

// dropIdentity forgets the token's sealed identity, every copy of it. The bytes are
// let go of, never written into (clear would wipe them): a snapshot being encoded
// beside the state machine shares them (State.Clone copies what commands change in
// place, and byte slices are only ever replaced).
func (t *Token) dropIdentity() { t.Sealed, t.SealedTo = nil, nil }

// Token states, as operators see them.
const (
	TokenPending   = "pending" // unused and unexpired: it admits its node
	TokenUsed      = "used"
	TokenExpired   = "expired"
	TokenCancelled = "cancelled"
	// TokenStale: unused and unexpired, but the signing key it carries was
	// retired since it was minted: the mesh refuses it (token_stale_key).
	TokenStale = "stale"
)

// StateAt is the token's state at a given time.
// Deadline is when the token stops admitting a first enrolment, as its text says:
// the text carries the expiry in whole seconds, and the record, its mint's time
// plus the ttl, up to a second later. Judged where a login and an enrolment come
// in (authn, the enrolment's handler), not by the log's rules, which every node
// must apply alike, old ones included: a token admitted past its printed expiry
// for up to a second (a docs walkthrough).
func (t *Token) Deadline() time.Time { return t.Expiry.Truncate(time.Second) }

func (t *Token) StateAt(at time.Time) string {
	switch {
	case !t.UsedAt.IsZero():
		return TokenUsed
	case !t.CancelledAt.IsZero():
		return TokenCancelled
	case !at.Before(t.Expiry):
		return TokenExpired
	}
	return TokenPending
}

// ShownState is the token's state at a given time as operators see it: StateAt's,
// TokenExpired for a pending control token whose sealed identity is gone
// (IdentityLost: it cannot admit its node), and TokenStale for a pending token whose
// signing key the keyring no longer holds. It is a view: the rules count a token
// whose identity is gone as pending until its expiry, as they always have.
func (s *State) ShownState(t *Token, at time.Time) string {
	st := s.staleOrState(t, at)
	if st != TokenUsed && st != TokenCancelled && t.IdentityLost() {
		return TokenExpired
	}
	return st
}

// staleOrState is what ShownState showed before IdentityLost: StateAt's, and
// TokenStale for a pending token whose signing key the keyring no longer holds.
// Rules before RulesPendingByRecord count pending tokens by it, and so must it stay.
func (s *State) staleOrState(t *Token, at time.Time) string {
	st := t.StateAt(at)
	if st == TokenPending && t.SigningKey != "" && !slices.Contains(s.Keyring.Keys, t.SigningKey) {
		return TokenStale
	}
	return st
}

// IdentityLost reports whether t is a control token, unused and not cancelled, that
// holds no sealed identity. The first command stamped at or after its expiry drops
// the identity (purgeTokens), so one that is not expired yet by a clock read now
// lost it to a command stamped by a leader whose clock was ahead of that one, and
// can admit no node: nothing brings the identity back. No rule of the state reads it.
func (t *Token) IdentityLost() bool {
	return t.Role == RoleControl && t.UsedAt.IsZero() && t.CancelledAt.IsZero() && !t.HoldsIdentity()
}

// Node is one enrolled machine.
type Node struct {
	ID         string            `json:"id"`
	Role       string            `json:"role"`
	PublicKey  string            `json:"public_key"` // nkey user public key
	Labels     map[string]string `json:"labels,omitempty"`
	EnrolledAt time.Time         `json:"enrolled_at"`
	Revoked    bool              `json:"revoked,omitempty"`
	RevokedAt  time.Time         `json:"revoked_at,omitzero"`
	Declared   Declared          `json:"declared"`
	Applied    Applied           `json:"applied"`
	// LastSeen is when the leader last heard from the node before its connection
	// closed (StatusCmd.Seen) or it was revoked (RevokeCmd.Seen): what LAST SEEN
	// shows of an offline or revoked node once no control node remembers hearing
	// from it, after a restart or a new leader. A heartbeat changes nothing in the
	// state; only a close or a revocation records it.
	LastSeen time.Time `json:"last_seen,omitzero"`
	// EarlierRevokedAt is when the machine enrolled under this id before this one
	// was revoked (zero: none was, or its enrolment was applied by a version before
	// this field): a second `meshctl revoke` of the id, a command run again, revokes
	// the machine enrolled since, and says so with it. Set at enrolment from the
	// record it replaces. No rule of the state reads it: a control node older than
	// it applies the enrolment alike without it, as it does RevokeCmd.Seen
	// (decision 0027).
	EarlierRevokedAt time.Time `json:"earlier_revoked_at,omitzero"`
	// EarlierEnrolledAt is when that machine had enrolled (zero: none, or not
	// known: its record was forgotten, or the enrolment was applied by a version
	// before this field): a declaration sent again under its request id names the
	// machine it reached, revoked since, only if it was enrolled then. No rule of
	// the state reads it (decision 0027), as EarlierRevokedAt.
	EarlierEnrolledAt time.Time `json:"earlier_enrolled_at,omitzero"`
}

// Declared is the declaration the mesh wants a node to hold. The signed envelope is
// derived from it (and the body) by whichever control node sends it.
type Declared struct {
	Version    uint64    `json:"version"`
	BodyDigest string    `json:"body_digest"`
	IssuedAt   time.Time `json:"issued_at"`
	ExpiresAt  time.Time `json:"expires_at"`
}

// Applied is what the node last reported.
type Applied struct {
	HaveApplied  bool      `json:"have_applied"`
	Version      uint64    `json:"version"`
	KeyringEpoch uint64    `json:"keyring_epoch"`
	ErrorCode    string    `json:"error_code,omitempty"`
	ErrorMessage string    `json:"error_message,omitempty"`
	ErrorVersion uint64    `json:"error_version,omitempty"`
	ErrorRetryAt time.Time `json:"error_retry_at,omitzero"`
	Stale        bool      `json:"stale,omitempty"`
	// HooksRunning: the host's hooks for what it applied are queued or running; it
	// has not converged until they ran.
	HooksRunning bool `json:"hooks_running,omitempty"`
	// Agent is the agent the node last named in its status (api.ValidAgent:
	// "meshhost/0.1.0+git…"; "" when it named none the control plane keeps). It
	// only ever changes with an upgrade of the host, so keeping it here costs a log
	// entry then and none per heartbeat (decision 0027). No rule of the state
	// reads it: a control node older than it applies these entries without it.
	Agent string `json:"agent,omitempty"`
	// BatchProofs: the node's agent verifies declarations signed in a batch
	// (decision 0034), as it says in its status. A fan-out signs the declarations
	// of such nodes as one tree. Like Agent, no rule of the state reads it, and it
	// changes only with an upgrade of the host.
	BatchProofs bool `json:"batch_proofs,omitempty"`
	// HeartbeatSeconds is how often the node's agent reports when nothing changes,
	// as it says in its status (0: it does not say; at most api.MaxHeartbeat). The
	// leader counts the node offline after three of them without a report, or
	// after its --offline-after if longer: kept here, and not in the leader's
	// memory, so that a new leader knows it before the node's next report. It
	// changes only when a host's setting does; no rule of the state reads it.
	HeartbeatSeconds uint32    `json:"heartbeat_seconds,omitempty"`
	ReportedAt       time.Time `json:"reported_at,omitzero"`
}

// Errors the state machine returns for refused commands. The enrolment refusals map to
// the protocol's error codes (see docs/protocol.md).
var (
	ErrNotInitialised = errors.New("the mesh state is not initialised yet")
	ErrTokenUnknown   = errors.New("no token with this secret was minted by this mesh")
	ErrTokenUsed      = errors.New("this token already enrolled a node; mint a new token")
	ErrTokenExpired   = errors.New("this token has expired; mint a new token")
	// ErrTokenExpiredAdmitted: a control token presented again by the key it
	// admitted, to resume a join that did not complete, after it expired: the
	// node stays an admitted control node, so a new token for it is refused until
	// it is removed. The protocol's code is token_expired.
	ErrTokenExpiredAdmitted = errors.New("this control token expired before the join it admitted completed")
	ErrTokenOtherNode       = errors.New("this token was minted for another node")
	ErrTokenWrongRole       = errors.New("this token admits another role")
	ErrTokenCancelled       = errors.New("this token was cancelled by an operator; ask for a new one")
	ErrNoToken              = errors.New("no token for this node is known (none was minted, or the last expired over a day ago)")
	ErrNoSuchToken          = errors.New("no such token of this node is known (meshctl token list shows a node's tokens; a token is forgotten a day after it expires)")
	ErrNodeExists           = errors.New("a node with this id is enrolled; revoke it first to enrol the id again")
	ErrKeyRevoked           = errors.New("this node key was revoked and stays refused")
	ErrKeyInUse             = errors.New("this node key is already enrolled as another node, and a key identifies one node only: enrol this machine with a key of its own")
	ErrUnknownNode          = errors.New("no such node")
	ErrKeyMismatch          = errors.New("the node holds another key than the one named: another machine is under the id now, and nothing was revoked")
	// ErrTokenPending: a token is minted for a node that has a pending one
	// (RulesTokensFollowNodes).
	ErrTokenPending = errors.New("a token for this node is pending")
	// ErrNodeRevoked: a label change names a revoked node (RulesTokensFollowNodes).
	ErrNodeRevoked = errors.New("this node is revoked; the machine enrolled next under its id takes the labels of its token: give them with meshctl token --label")
	// ErrTooManyLabels: a label change would leave its node with more labels than
	// its LabelCmd.Max (RulesLabelCap).
	ErrTooManyLabels = errors.New("too many labels")
	// ErrRotationMissesNode: a rotation seals its new key to none of a control node's
	// copies (RulesRotateSealedToAll).
	ErrRotationMissesNode = errors.New("the rotation does not seal its new key to every active control node")
	ErrBadCommand         = errors.New("malformed command")
	ErrNoTargets          = errors.New("the declaration matches no enrolled, unrevoked node")
	// ErrOutOfVersions: a node's declared version is the last there is (OutOfVersions).
	ErrOutOfVersions = errors.New("declared the last version there is: the next would wrap around to v0, which the host refuses as older than what it holds (a broken or hostile agent reported that version before reports were bounded); check the machine, revoke the node and enrol it again with a new token (its new key starts its versions over)")
)

// New returns an empty state.
func New() *State {
	return &State{
		Tokens:       map[string]*Token{},
		Nodes:        map[string]*Node{},
		Bodies:       map[string]json.RawMessage{},
		RevokedKeys:  map[string]string{},
		ControlNodes: map[string]*ControlNode{},
		byKey:        map[string]string{},
		revokedOf:    map[string][]string{},
		tokensOf:     map[string][]string{},
	}
}

// reindex rebuilds the derived indexes after a restore. The key index must come out
// the same on every control node whatever order the map yields the nodes in: a state
// written before one key was refused for a second node may hold a key twice, and the
// broker's authentication hook would then grant it whichever node this node happened
// to index last. The node that holds a key is the one enrolled with it first.
func (s *State) reindex() {
	s.byKey = make(map[string]string, len(s.Nodes))
	for _, id := range slices.Sorted(maps.Keys(s.Nodes)) {
		s.indexHolder(s.Nodes[id])
	}
	s.revokedOf = map[string][]string{}
	for key, id := range s.RevokedKeys {
		s.revokedOf[id] = append(s.revokedOf[id], key)
	}
	s.tokensOf = map[string][]string{}
	for id, t := range s.Tokens {
		s.tokensOf[t.Node] = append(s.tokensOf[t.Node], id)
	}
}

// addToken records t in Tokens and its index.
func (s *State) addToken(t *Token) {
	s.Tokens[t.ID] = t
	s.tokensOf[t.Node] = append(s.tokensOf[t.Node], t.ID)
}

// dropToken removes token id from Tokens and its index.
func (s *State) dropToken(id string) {
	t, ok := s.Tokens[id]
	if !ok {
		return
	}
	delete(s.Tokens, id)
	if ids := slices.DeleteFunc(s.tokensOf[t.Node], func(x string) bool { return x == id }); len(ids) > 0 {
		s.tokensOf[t.Node] = ids
	} else {
		delete(s.tokensOf, t.Node)
	}
}

// revokeKey records key as revoked, node's: in RevokedKeys and its index.
func (s *State) revokeKey(key, node string) {
	if was, ok := s.RevokedKeys[key]; ok {
		if was == node {
			return
		}
		// Not reached by any command (a revoked key enrols nothing), but a
		// snapshot is not checked for it: the index follows the map.
		s.revokedOf[was] = slices.DeleteFunc(s.revokedOf[was], func(k string) bool { return k == key })
	}
	s.RevokedKeys[key] = node
	s.revokedOf[node] = append(s.revokedOf[node], key)
}

// indexHolder indexes n under its key unless a node enrolled before it holds the key
// (enrolled at the same instant: the lesser id).
func (s *State) indexHolder(n *Node) {
	if id, ok := s.byKey[n.PublicKey]; ok {
		if h := s.Nodes[id]; h != nil && h != n && heldFirst(h, n) {
			return
		}
	}
	s.byKey[n.PublicKey] = n.ID
}

// heldFirst reports whether a was enrolled with its key before b.
func heldFirst(a, b *Node) bool {
	if c := a.EnrolledAt.Compare(b.EnrolledAt); c != 0 {
		return c < 0
	}
	return a.ID < b.ID
}

// reindexKey points the key index at whichever node still holds key, if any, as
// reindex would. It walks every node, so it is for rare changes only (a node id
// enrolled again after its revocation).
func (s *State) reindexKey(key string) {
	delete(s.byKey, key)
	for _, n := range s.Nodes {
		if n.PublicKey == key {
			s.indexHolder(n)
		}
	}
}

// keyTaken refuses a key enrolled as a node other than node that is not revoked.
func (s *State) keyTaken(key, node string) error {
	id, ok := s.byKey[key]
	if !ok || id == node {
		return nil
	}
	if n := s.Nodes[id]; n != nil && !n.Revoked {
		return fmt.Errorf("%w (it is the key of node %s)", ErrKeyInUse, id)
	}
	return nil
}

// Clone returns a copy that shares nothing a command changes in place: readers, and
// a snapshot encoded beside the state machine (FSM.Snapshot), never see a change
// made after it. Byte slices (sealed identities and keys, bodies, keyring
// envelopes) are shared: no command writes into one, each is replaced whole.
func (s *State) Clone() *State {
	c := s.snapshotCopy()
	c.byKey = maps.Clone(s.byKey)
	c.revokedOf = make(map[string][]string, len(s.revokedOf))
	for id, keys := range s.revokedOf {
		c.revokedOf[id] = slices.Clone(keys)
	}
	c.tokensOf = make(map[string][]string, len(s.tokensOf))
	for node, ids := range s.tokensOf {
		c.tokensOf[node] = slices.Clone(ids)
	}
	return c
}

// snapshotCopy is Clone without the derived indexes (byKey, revokedOf, tokensOf),
// which a snapshot does not encode and a restore rebuilds (reindex): FSM.Snapshot
// makes it under the read lock every Apply waits for, and after a year of 500
// machines replaced a day the indexes' 182,500 revocations were most of its
// cost (BenchmarkSnapshotAfterAYear). Its methods that read an index are not to
// be called.
func (s *State) snapshotCopy() *State {
	c := *s
	c.Keyring.Keys = slices.Clone(s.Keyring.Keys)
	c.Keyrings = maps.Clone(s.Keyrings)
	c.SealedKeys = maps.Clone(s.SealedKeys)
	c.Tokens = make(map[string]*Token, len(s.Tokens))
	for k, t := range s.Tokens {
		tc := *t
		tc.Labels = maps.Clone(t.Labels)
		// What a command changes in place is copied; byte blobs are only ever
		// replaced, never written into.
		tc.SealedTo = maps.Clone(t.SealedTo)
		if t.Control != nil {
			ctl := *t.Control
			tc.Control = &ctl
		}
		c.Tokens[k] = &tc
	}
	c.Nodes = make(map[string]*Node, len(s.Nodes))
	for k, n := range s.Nodes {
		nc := *n
		nc.Labels = maps.Clone(n.Labels)
		c.Nodes[k] = &nc
	}
	c.Bodies = maps.Clone(s.Bodies)
	c.RevokedKeys = maps.Clone(s.RevokedKeys)
	c.Forgotten = maps.Clone(s.Forgotten)
	c.RevokedOperators = maps.Clone(s.RevokedOperators)
	if s.Operators != nil {
		c.Operators = make(map[string]*Operator, len(s.Operators))
		for k, o := range s.Operators {
			oc := *o
			c.Operators[k] = &oc
		}
	}
	c.Requests = maps.Clone(s.Requests)
	c.ControlNodes = make(map[string]*ControlNode, len(s.ControlNodes))
	for k, n := range s.ControlNodes {
		nc := *n
		c.ControlNodes[k] = &nc
	}
	c.byKey, c.revokedOf, c.tokensOf = nil, nil, nil
	return &c
}

// Initialised reports whether the mesh's first command has been applied.
func (s *State) Initialised() bool { return s.Mesh != "" }

// TokenState classifies a token record against a presented node, role and key at a
// given time, returning nil when the enrolment may proceed (or is a repeat of one that
// did). Both the enrolment handler (to answer quickly) and the state machine (to decide
// for good) use it.
func (s *State) TokenState(id, node, role, key string, at time.Time) (*Token, error) {
	t, ok := s.Tokens[id]
	if !ok {
		return nil, ErrTokenUnknown
	}
	if t.Node != node {
		return t, fmt.Errorf("%w (%s), not for %s", ErrTokenOtherNode, t.Node, node)
	}
	if t.Role != role {
		return t, fmt.Errorf("%w: it admits a %s, not a %s", ErrTokenWrongRole, t.Role, role)
	}
	if !t.CancelledAt.IsZero() {
		return t, ErrTokenCancelled
	}
	if !t.UsedAt.IsZero() {
		if _, revoked := s.RevokedKeys[key]; revoked && t.UsedKey == key {
			// The node this token enrolled was revoked since: a "repeat" would hand
			// the revoked key a freshly signed declaration.
			return t, ErrKeyRevoked
		}
		if t.UsedKey == key && (at.Before(t.Expiry) || t.Role == RoleWorker) {
			// The same enrolment again: its reply was lost. (Only a state written
			// before a key was refused for a second node can hold this key under
			// another node too; the broker knows the key as that one.)
			//
			// A worker's is answered after the token expired too, as long as its
			// record is kept (a day): the answer hands over nothing the node's own
			// key cannot fetch by logging in, and the asker proved that key and the
			// token. Refused as used, the machine was told to ask for a new token,
			// which the mesh then refused (node_exists) until the node that was
			// this very machine was revoked: a host whose answer was lost and that
			// ran enrol again after the hour (a disk freed, a network back late).
			// A control token's repeat hands over the mesh's signing key, and stays
			// bounded by its hour (decision 0004; ErrTokenExpiredAdmitted below).
			if err := s.keyTaken(key, node); err != nil {
				return t, err
			}
			return t, nil
		}
		if cn, ok := s.ControlNodes[node]; ok && t.UsedKey == key && t.Role == RoleControl && !cn.Removed && cn.JoinedAt.Equal(t.UsedAt) {
			// (JoinedAt: the node admitted now is the one this token admitted, not
			// another machine admitted under the id since it was removed, which
			// "remove it" would take out.)
			// The machine it admitted, resuming its join after the token expired:
			// "used; mint a new token" was wrong twice over (it is this machine's
			// token, and a new one is refused while the node is admitted).
			return t, fmt.Errorf("%w: it admitted %s, this machine's key, at %s, and expired at %s; a join resumes with its token only until then. "+
				"%s stays an admitted control node: remove it (meshctl control remove %s), mint a new control token for it where the CA key is, "+
				"and run meshctl join with that (into the same --data directory)",
				ErrTokenExpiredAdmitted, node, t.UsedAt.UTC().Format(time.RFC3339), t.Expiry.UTC().Format(time.RFC3339), node, node)
		}
		if cn, ok := s.ControlNodes[node]; ok && t.Role == RoleControl && !cn.Removed {
			// Another machine's join with a control token that admitted the node:
			// "mint a new token" met node_exists while the node stays admitted (a
			// docs walkthrough). Said with the step that comes first.
			if t.UsedKey != key && cn.JoinedAt.Equal(t.UsedAt) {
				return t, fmt.Errorf("%w: it admitted control node %s (another key, at %s), which stays admitted: to join %s on this machine instead, remove it first (meshctl control remove %s), then mint a new control token for it",
					ErrTokenUsed, node, t.UsedAt.UTC().Format(time.RFC3339), node, node)
			}
			// The node this token admitted was removed, and another admission of the
			// id stands since (possibly on another machine): not "another key", nor
			// the admission this token made (a review).
			return t, fmt.Errorf("%w: the control node %s it admitted at %s was removed, and %s was admitted again since, at %s, with another token: to join %s on this machine instead, remove it first (meshctl control remove %s), then mint a new control token for it",
				ErrTokenUsed, node, t.UsedAt.UTC().Format(time.RFC3339), node, cn.JoinedAt.UTC().Format(time.RFC3339), node, node)
		}
		return t, ErrTokenUsed
	}
	if !at.Before(t.Expiry) {
		return t, fmt.Errorf("%w (it expired %s ago)", ErrTokenExpired, at.Sub(t.Expiry).Round(time.Second))
	}
	if _, revoked := s.RevokedKeys[key]; revoked {
		return t, ErrKeyRevoked
	}
	if err := s.keyTaken(key, node); err != nil {
		return t, err
	}
	if err := s.idTaken(node); err != nil {
		return t, err
	}
	return t, nil
}

// NodeByKey returns the node holding a public key, if any.
func (s *State) NodeByKey(key string) (*Node, bool) {
	id, ok := s.byKey[key]
	if !ok {
		return nil, false
	}
	n, ok := s.Nodes[id]
	return n, ok
}
