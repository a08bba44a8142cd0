package api

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"mesh/controlplane/pki"
	"mesh/host/jsonkeys"
)

// Operator API operations, each served on AdminPrefix + op by the Raft leader.
const (
	OpPing        = "ping"
	OpTokenCreate = "token.create"
	OpTokenList   = "token.list"
	OpTokenCancel = "token.cancel"
	OpDeclare     = "declare"
	OpProgress    = "progress"
	OpNodes       = "nodes"
	OpRevoke      = "revoke"
	OpLabel       = "label"

	OpControlAdd     = "control.add"
	OpControlConfirm = "control.confirm"
	OpControlAbort   = "control.abort"
	OpControlRemove  = "control.remove"

	OpSigningKeyRotate = "signing-key.rotate"
	OpSigningKeyStatus = "signing-key.status"
	OpSigningKeyRetire = "signing-key.retire"
)

// AdminOps returns every operation of the operator API.
func AdminOps() []string {
	return []string{OpPing, OpTokenCreate, OpTokenList, OpTokenCancel, OpDeclare, OpProgress, OpNodes, OpRevoke, OpLabel,
		OpControlAdd, OpControlConfirm, OpControlAbort, OpControlRemove,
		OpSigningKeyRotate, OpSigningKeyStatus, OpSigningKeyRetire,
		OpOperatorAdd, OpOperatorList, OpOperatorRevoke}
}

// ReadOnly reports whether op only reads: it changes nothing, so running it again is
// always safe, and the control plane serves it beside the changes in flight.
func ReadOnly(op string) bool {
	switch op {
	case OpPing, OpNodes, OpProgress, OpTokenList, OpSigningKeyStatus, OpOperatorList:
		return true
	}
	return false
}

// ReadOnlySubjects returns the subjects of the operations that only read (ReadOnly):
// all the operator credentials of a removed control node may request.
func ReadOnlySubjects() []string {
	var out []string
	for _, op := range AdminOps() {
		if ReadOnly(op) {
			out = append(out, AdminSubject(op))
		}
	}
	return out
}

// Repeatable reports whether the same request for op may be sent again when no answer
// came: a read, or a token creation, which the control plane answers with the token
// it already minted for the same secret's hash instead of a second one, or the
// record of operator credentials, answered with the record made for the same key.
func Repeatable(op string) bool {
	return ReadOnly(op) || op == OpTokenCreate || op == OpOperatorAdd
}

// KeyringResult describes the keyring a rotation or retirement installed.
type KeyringResult struct {
	Epoch uint64   `json:"epoch"`
	Keys  []string `json:"keys"`
	// Stranded lists the live nodes a forced retirement left behind.
	Stranded []string `json:"stranded,omitempty"`
	// StaleTokens lists, by node, the pending tokens a retirement made useless:
	// they carry the retired key, and the mesh refuses them (token_stale_key).
	StaleTokens []string `json:"stale_tokens,omitempty"`
	// Unchanged answers a retirement with no rotation in progress: the keyring
	// holds one key, and nothing was retired now (a retire run twice, or a rotate
	// that did not complete). Older control planes leave it out.
	Unchanged bool `json:"unchanged,omitempty"`
}

// RotateRequest asks for a new signing key. It has no arguments: its envelope,
// an AdminRequest naming this operation, is what makes it explicit.
type RotateRequest struct{}

// KeyringStatusRequest asks for the keyring and each node's acknowledgement.
type KeyringStatusRequest struct{}

// RetireRequest asks to retire the old signing key.
type RetireRequest struct {
	Force bool `json:"force,omitempty"`
}

// KeyringStatus is the current keyring and what each node acknowledged.
type KeyringStatus struct {
	Epoch uint64       `json:"epoch"`
	Keys  []string     `json:"keys"`
	Nodes []KeyringAck `json:"nodes"`
}

// KeyringAck is the keyring epoch a node last reported.
type KeyringAck struct {
	Node  string `json:"node"`
	State string `json:"state"`
	Epoch uint64 `json:"epoch"`
	// Gone: the node cannot follow the chain of keyrings any more and must be
	// enrolled again (KeyringGone). A control plane before it never says it.
	Gone bool `json:"keyring_gone,omitempty"`
}

// ControlRequest names a control node.
type ControlRequest struct {
	Node string `json:"node"`
}

// ControlAddResult tells a joiner which log index proves it replicates.
type ControlAddResult struct {
	ProbeIndex uint64 `json:"probe_index"`
}

// ControlConfirmRequest proves replication: the ids of the probe entries the joiner
// applied, which reached it only through the log.
type ControlConfirmRequest struct {
	Node   string   `json:"node"`
	Probes []string `json:"probes"`
}

// ControlConfirmResult says what the leader made of the confirmed node.
type ControlConfirmResult struct {
	Voter    bool     `json:"voter"`
	Promoted []string `json:"promoted,omitempty"`
	Voters   []string `json:"voters"`
	Note     string   `json:"note,omitempty"`
}

// ControlView is a control node as operators see it.
type ControlView struct {
	ID           string    `json:"id"`
	Broker       string    `json:"broker"`
	Raft         string    `json:"raft_role"` // leader, voter, nonvoter, not a member, removed
	State        string    `json:"state"`     // alive, offline, removed
	LastSeen     time.Time `json:"last_seen,omitzero"`
	AppliedIndex uint64    `json:"applied_index,omitempty"`
	CAHolder     bool      `json:"ca_holder,omitempty"`
	// CurveKey is the public curve key of the machine admitted under ID: a
	// machine removed, whose id another machine joined under since, learns from it
	// that it was removed (its own key is not this one).
	CurveKey string `json:"curve_key,omitempty"`
	// Hosts is what the node's broker holds, as it last said (nil: offline, not
	// heard from, or a version that does not say).
	Hosts *HostCapacity `json:"hosts,omitempty"`
	// NotFollowing says why a member of Raft that is alive does not follow the
	// leader, by its heartbeats: it follows no leader or another, or its applied
	// index trails the answering node's, in every one of its last few heartbeats
	// (since NotFollowingSince). Empty when it follows, and when the answering
	// node is of a version from before the field; a node of such a version is
	// judged by its applied index alone, its heartbeats carrying no Raft state.
	// Such a voter counts towards no commit: the others hold the quorum without it.
	NotFollowing      string    `json:"not_following,omitempty"`
	NotFollowingSince time.Time `json:"not_following_since,omitzero"`
	// CertNotAfter is when the node's own certificate (its tls.pem: its broker's,
	// Raft's and routes') expires, and CANotAfter when the mesh CA's certificate it
	// serves with (its ca.pem) does, as the node read them when it started: the
	// answering node's own, and another's by its heartbeats. Zero for a node not
	// alive (its files may have been renewed since it stopped), and when that node
	// or the answering one is of a version from before the fields.
	CertNotAfter time.Time `json:"cert_not_after,omitzero"`
	CANotAfter   time.Time `json:"ca_not_after,omitzero"`
}

// HostCapacity is how many hosts a control node's broker holds, and the most it
// holds (0: not capped); the rest are refused and go to another control node.
type HostCapacity struct {
	Connected int `json:"connected"`
	Max       int `json:"max"`
}

// Control node Raft roles in a ControlView.
const (
	RaftLeader    = "leader"
	RaftVoter     = "voter"
	RaftNonvoter  = "nonvoter"
	RaftNotMember = "not a member"
	RaftRemoved   = "removed"
)

// MaxControlHeartbeat caps a control node's heartbeat, in bytes: one of a mesh of a
// hundred control nodes, whose Raft configuration it carries, is a few KiB. The
// broker let 2 MiB through, which the leader parsed under the lock of operators'
// changes at every round of its autopilot (a review).
const MaxControlHeartbeat = 32 << 10

// ControlHeartbeatSubject is where control node id reports itself.
func ControlHeartbeatSubject(id string) string { return ControlPrefix + id + ".heartbeat" }

// ControlHeartbeat is a control node's periodic report.
type ControlHeartbeat struct {
	V            int    `json:"v"`
	Node         string `json:"node"`
	AppliedIndex uint64 `json:"applied_index"`
	Raft         string `json:"raft"`
	// CAKey says the node's data directory holds the CA key and the operator
	// account key, so control tokens can be minted there: the bootstrap machine's,
	// or a node they were restored to from their backup.
	CAKey bool `json:"ca_key,omitempty"`
	// Hosts is what the node's broker holds (older versions send none).
	Hosts *HostCapacity `json:"hosts,omitempty"`
	// Stopping is the last heartbeat of a node shutting down: the others show it
	// offline at once rather than for three heartbeats more.
	Stopping bool `json:"stopping,omitempty"`
	// Rules is the revision of the rules by which the node applies the replicated log
	// (state.ApplyRules); older versions send none.
	Rules int `json:"rules,omitempty"`
	// Clock is the node's wall clock as it sent the heartbeat, so the others can
	// say when its clock disagrees with theirs; older versions send none.
	Clock time.Time `json:"clock,omitzero"`
	// LogWriteFailing says the node's last write to its Raft log failed and none
	// succeeded since (a full disk): it answers the leader but appends nothing,
	// so it counts towards no commit. Older versions send none.
	LogWriteFailing bool `json:"log_write_failing,omitempty"`
	// RaftState is the node's Raft state as it sent (RaftStateLeader,
	// RaftStateFollower, RaftStateCandidate, RaftStateShutdown), Leader the
	// leader it follows ("": none) and Term its Raft term, so that the others can
	// tell a voter that does not follow the leader from one that does: a voter
	// whose Raft port is cut off answers on the broker as any other. Older
	// versions send none of the three.
	RaftState string `json:"raft_state,omitempty"`
	Leader    string `json:"leader,omitempty"`
	Term      uint64 `json:"term,omitempty"`
	// CertNotAfter is when the node's own certificate (its tls.pem) expires, and
	// CANotAfter when the mesh CA's certificate it serves with (its ca.pem) does, as
	// it read them when it started, so that `meshctl control status` can name a
	// control node whose certificate expires soon wherever it asks. Older versions
	// send neither, and older nodes ignore them (heartbeats are decoded leniently).
	CertNotAfter time.Time `json:"cert_not_after,omitzero"`
	CANotAfter   time.Time `json:"ca_not_after,omitzero"`
	// RaftConfig is the Raft configuration the node holds, as
	// replication.Node.ConfigurationText writes it, so that the leader can tell a
	// member that kept another one (a snapshot installed over newer entries, a
	// recovery's peers file not given to it) and append its own again. Older
	// versions send none.
	RaftConfig string `json:"raft_config,omitempty"`
}

// AdminSubject is the subject of an operator API operation.
func AdminSubject(op string) string { return AdminPrefix + op }

// RetiredSubject is where the control plane serves op to the operator credentials
// of removed control nodes, which request it on AdminSubject(op).
func RetiredSubject(op string) string { return RetiredPrefix + op }

// AdminRequest wraps every operator request but a ping: the protocol version, the
// operation (which must match the subject it is sent on) and its arguments. The
// control plane decodes it strictly, so nothing but a request made for that very
// operation, such as another call's reply delivered there, can act.
type AdminRequest struct {
	V    int             `json:"v"`
	Op   string          `json:"op"`
	Args json.RawMessage `json:"args"`
	// Again marks a change sent again, under the request id of its first sending
	// (RequestHeader), because the answer to that one was lost. The control plane
	// carries it out only if the first was not, and refuses it when it cannot
	// tell; a control plane older than the field refuses it as an unknown member,
	// and carries out nothing.
	Again bool `json:"again,omitempty"`
}

// RequestHeader is the message header that carries a change's request id
// (NewRequestID): meshctl sends the same change again under it when the answer
// was lost, and the control plane carries out one change per id
// (state.RulesRequests). Control planes older than it ignore the header.
const RequestHeader = "Mesh-Request"

// NewRequestID returns a fresh request id: 16 random bytes in hex.
func NewRequestID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on the systems we run on
	}
	return hex.EncodeToString(b[:])
}

// ErrRequestID is CheckRequestID's refusal.
var ErrRequestID = errors.New("malformed request id")

// CheckRequestID accepts a request id as NewRequestID makes them: 32 lowercase
// hex digits.
func CheckRequestID(id string) error {
	if len(id) != 32 {
		return fmt.Errorf("%w: %d characters; want 32 hex digits", ErrRequestID, len(id))
	}
	for _, r := range id {
		if !('0' <= r && r <= '9' || 'a' <= r && r <= 'f') {
			return fmt.Errorf("%w: want 32 lowercase hex digits", ErrRequestID)
		}
	}
	return nil
}

// MaxResend is how long after a change was first sent meshctl may send it again
// under the same request id: well within the time the control plane keeps ids on
// record (state.RequestRetention, an hour).
const MaxResend = 10 * time.Minute

// Resendable reports whether meshctl sends a change of op again, under its
// request id, when its answer was lost; the control plane carries it out once.
func Resendable(op string) bool {
	return op == OpDeclare
}

// EncodeAdminRequest wraps args as a request for op.
func EncodeAdminRequest(op string, args any) ([]byte, error) {
	raw, err := json.Marshal(args)
	if err != nil {
		return nil, err
	}
	return json.Marshal(AdminRequest{V: ProtocolVersion, Op: op, Args: raw})
}

// EncodeAdminRequestAgain wraps args as a change of op sent again
// (AdminRequest.Again).
func EncodeAdminRequestAgain(op string, args any) ([]byte, error) {
	raw, err := json.Marshal(args)
	if err != nil {
		return nil, err
	}
	return json.Marshal(AdminRequest{V: ProtocolVersion, Op: op, Args: raw, Again: true})
}

// ErrAdminRequest is the base of DecodeAdminRequest's refusals.
var ErrAdminRequest = errors.New("not a request for this operation")

// DecodeAdminRequest decodes a request sent to op into args. It refuses, each with
// its reason, anything that is not exactly an AdminRequest for op: unknown fields,
// another version, another operation, arguments that do not
// decode strictly into args.
func DecodeAdminRequest(op string, data []byte, args any) error {
	_, err := DecodeAdminCall(op, data, args)
	return err
}

// DecodeAdminCall is DecodeAdminRequest that also says whether the request is a
// change sent again (AdminRequest.Again).
func DecodeAdminCall(op string, data []byte, args any) (again bool, err error) {
	req, err := decodeAdminRequest(op, data, args)
	return req.Again, err
}

func decodeAdminRequest(op string, data []byte, args any) (AdminRequest, error) {
	var req AdminRequest
	if err := decodeStrict(data, &req); err != nil {
		return req, fmt.Errorf("%w: %v (send {\"v\":%d,\"op\":%q,\"args\":{...}})", ErrAdminRequest, err, ProtocolVersion, op)
	}
	if req.V != ProtocolVersion {
		return req, fmt.Errorf("%w: version %d; this control plane speaks %d", ErrAdminRequest, req.V, ProtocolVersion)
	}
	if req.Op != op {
		return req, fmt.Errorf("%w: it names operation %q, but was sent to %q", ErrAdminRequest, req.Op, op)
	}
	if len(req.Args) == 0 {
		return req, fmt.Errorf("%w: args is missing", ErrAdminRequest)
	}
	if req.Again && !Resendable(op) {
		return req, fmt.Errorf("%w: %s is not a change sent again (again is for %s)", ErrAdminRequest, op, OpDeclare)
	}
	if err := decodeStrict(req.Args, args); err != nil {
		return req, fmt.Errorf("%w: args: %v", ErrAdminRequest, err)
	}
	return req, nil
}

// RefusedMember reports whether err is a control plane's refusal of a request for
// carrying member, a member it does not know: an older control plane reads
// requests strictly (decodeStrict) and says so only in encoding/json's words,
// `json: unknown field "member"`, in a bad_request. meshctl tells an older control
// plane by it; this is the one place that reads those words, and it reads them
// whole, so that a value the refusal quotes ("key" in `key "key" is not a node's
// public key`) is not taken for the member.
func RefusedMember(err error, member string) bool {
	var ae *Error
	return errors.As(err, &ae) && ae.Code == CodeBadRequest && strings.Contains(ae.Message, `unknown field "`+member+`"`)
}

// decodeStrict decodes one JSON value, refusing unknown fields, trailing data, a
// member twice and a member named in another case than its field.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	// Anything but white space after the value is trailing data. dec.More would
	// miss a stray '}' or ']', which it reads as the end of an enclosing value.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the JSON value")
	}
	// encoding/json keeps the last of two members of one name and takes "Node"
	// for "node": an operator's request is read one way only, or refused.
	return jsonkeys.Check(data, v)
}

// AdminResponse wraps every operator API answer: either Error or Result.
type AdminResponse struct {
	V      int             `json:"v"`
	Error  *Error          `json:"error,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	// NotDone says, with Error, that nothing of the request was carried out and
	// that it may be sent again as it is: the control node that took it no longer
	// led, and the change never reached the log. meshctl sends it again; an older
	// meshctl ignores it and reports Error (unavailable, exit 3).
	NotDone bool `json:"not_done,omitempty"`
}

// PingResult identifies the control node that answered.
type PingResult struct {
	Mesh   string `json:"mesh"`
	Node   string `json:"node"`
	Leader bool   `json:"leader"`
}

// TokenCreateRequest records a token minted by the operator's meshctl. The secret is
// generated by meshctl and never leaves it: only its hash travels.
type TokenCreateRequest struct {
	ID string `json:"id"` // hex SecretHash
	// ProofKey is the public half of the key the secret derives (hex,
	// tokenfmt.Token.ProofKey): enrolling clients prove the secret with it.
	ProofKey string            `json:"proof_key"`
	Node     string            `json:"node"`
	Role     string            `json:"role"`
	Labels   map[string]string `json:"labels,omitempty"`
	TTL      Duration          `json:"ttl"`
	// Control tokens only: the addresses the node is admitted with, and its TLS
	// identity and operator credentials sealed under the token secret by the CA
	// holder that minted it.
	Control *ControlMember `json:"control,omitempty"`
	Sealed  []byte         `json:"sealed,omitempty"`
	// Replace cancels the node's pending tokens as this one is minted; without it, a
	// pending token refuses the request (token_pending). A control plane older than
	// this field refuses the request as an unknown member.
	Replace bool `json:"replace,omitempty"`
}

// ControlClaim is what the mesh CA signs for a control token's creation, r, in mesh:
// the terms the control plane takes from r and would hand a joiner for.
func (r TokenCreateRequest) ControlClaim(mesh string) pki.ControlClaim {
	c := r.Control
	if c == nil {
		c = &ControlMember{}
	}
	return pki.ControlClaim{Mesh: mesh, TokenID: r.ID, Node: r.Node, Broker: c.Broker, Raft: c.Raft, Cluster: c.Cluster,
		Pin: c.Pin, Operator: c.Operator, ProofKey: r.ProofKey, SealedSum: pki.SealedSum(r.Sealed), Expiry: c.ClaimExpiry}
}

// TokenCreateResult tells meshctl what to put in the token besides the secret.
type TokenCreateResult struct {
	Mesh       string    `json:"mesh"`
	Brokers    []string  `json:"brokers"`
	CAPin      string    `json:"ca_pin"`
	SigningKey string    `json:"signing_key"` // hex: the current key hosts will believe
	Expiry     time.Time `json:"expiry"`
	// Replaced lists the pending tokens the request cancelled (Replace).
	Replaced []TokenView `json:"replaced,omitempty"`
}

// TokenListRequest asks for the tokens the mesh remembers; Node filters them when set.
type TokenListRequest struct {
	Node string `json:"node,omitempty"`
}

// TokenView is one minted token as operators see it: what it admits and its state,
// never its secret. ID is the first 12 hex digits of the secret's hash, enough to tell
// two tokens of one node apart and useless for enrolling.
type TokenView struct {
	ID          string            `json:"id"`
	Node        string            `json:"node"`
	Role        string            `json:"role"`
	Labels      map[string]string `json:"labels,omitempty"`
	CreatedAt   time.Time         `json:"created_at"`
	ExpiresAt   time.Time         `json:"expires_at"`
	State       string            `json:"state"` // pending, used, expired, cancelled, stale
	UsedAt      time.Time         `json:"used_at,omitzero"`
	CancelledAt time.Time         `json:"cancelled_at,omitzero"`
}

// TokenListResult lists tokens by creation time, oldest first. Used, expired and
// cancelled tokens are kept, and listed, until a day after their expiry.
type TokenListResult struct {
	Tokens []TokenView `json:"tokens"`
}

// TokenCancelRequest cancels pending tokens of a node: those IDs names (TokenView.ID,
// as token list shows them), or, without IDs (an older meshctl), every token of the
// node pending when the control plane applies it, one minted since the operator
// looked included. A control plane older than IDs refuses the request as an unknown
// member, and cancels nothing.
type TokenCancelRequest struct {
	Node string   `json:"node"`
	IDs  []string `json:"ids,omitempty"`
}

// MaxCancelTokens is how many tokens one cancellation names at most.
const MaxCancelTokens = 64

// TokenIDLen is the length of a token's id as operators see it (TokenView.ID):
// the first hex digits of the hash of its secret.
const TokenIDLen = 12

// CheckTokenID accepts a token id as token list shows it: TokenIDLen lowercase hex
// digits.
func CheckTokenID(id string) error {
	if len(id) != TokenIDLen {
		return fmt.Errorf("token id %q: %d characters; a token's id is the %d hex digits meshctl token list shows", id, len(id), TokenIDLen)
	}
	for _, r := range id {
		if !('0' <= r && r <= '9' || 'a' <= r && r <= 'f') {
			return fmt.Errorf("token id %q: a token's id is %d lowercase hex digits, as meshctl token list shows it", id, TokenIDLen)
		}
	}
	return nil
}

// TokenCancelResult lists the tokens cancelled: none when the node's tokens (those
// named) were all used, expired or cancelled already. NotPending are the tokens
// named that were not pending, with their state; StillPending the node's pending
// tokens not named (minted after meshctl read them), left pending.
type TokenCancelResult struct {
	Node         string      `json:"node"`
	Cancelled    []TokenView `json:"cancelled"`
	NotPending   []TokenView `json:"not_pending,omitempty"`
	StillPending []TokenView `json:"still_pending,omitempty"`
}

// DeclareRequest assigns a body to selected nodes.
type DeclareRequest struct {
	Nodes  []string          `json:"nodes,omitempty"`
	Role   string            `json:"role,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	All    bool              `json:"all,omitempty"`
	Body   json.RawMessage   `json:"body"`
	// DryRun asks what the declaration would change, node by node, and changes
	// nothing: no Raft entry, no signature, no message to a host. The answer is
	// DeclareResult.Plan. A control plane older than this field refuses the
	// request as an unknown member (DecodeAdminRequest): it never declares instead.
	DryRun bool `json:"dry_run,omitempty"`
}

// ChangesNothing reports whether the request asks to change nothing: a dry run.
func (r DeclareRequest) ChangesNothing() bool { return r.DryRun }

// Assignment is one node's new declared version.
type Assignment struct {
	Node    string `json:"node"`
	Version uint64 `json:"version"`
}

// DeclareResult lists the versions assigned, and the selected nodes that were not.
type DeclareResult struct {
	Assignments []Assignment `json:"assignments"`
	Skipped     []string     `json:"skipped,omitempty"`
	// Body is the digest of the body declared (state.BodyDigest); older control
	// planes leave it out. `declare --wait` hands it back (ProgressRequest.Body).
	Body string `json:"body,omitempty"`
	// Plan answers a dry run (DeclareRequest.DryRun), which assigns nothing.
	Plan *DeclarePlan `json:"plan,omitempty"`
	// Repeated says the declaration was carried out by an earlier sending of the
	// same request (its answer lost): Assignments are the nodes declared with its
	// body now, at the versions they hold.
	Repeated bool `json:"repeated,omitempty"`
	// NoLonger, with Repeated, lists the nodes the selector names or matches,
	// enrolled before the request was carried out, that hold its body no longer:
	// declared another body since (State superseded, Version the version that
	// did) or revoked since (State revoked, RevokedAt). A control plane older than
	// it leaves them out.
	NoLonger []TargetProgress `json:"no_longer,omitempty"`
}

// MaxPlanSize bounds a dry run's answer, well inside the broker's 2 MiB message
// cap. The counts of a plan are always whole; past this size its lists of nodes
// and paths are cut (PlanGroup.Truncated), largest groups kept first.
const MaxPlanSize = 512 << 10

// DeclarePlan is what a declaration would change. Nodes whose change is the same
// (the same paths added, changed the same way, removed, and as many unchanged) form
// one group, so a fleet's answer has as many groups as there are distinct changes,
// not nodes. Content never travels: paths, modes, owners and sizes only.
type DeclarePlan struct {
	Body      string      `json:"body"`      // digest of the body declared (state.BodyDigest)
	Nodes     int         `json:"nodes"`     // nodes that would get the declaration
	Changing  int         `json:"changing"`  // of them, nodes whose files would change
	Unchanged int         `json:"unchanged"` // of them, nodes that hold these very files already
	Groups    []PlanGroup `json:"groups"`    // most nodes first
	// OtherGroups and OtherNodes count the groups left out to fit MaxPlanSize.
	OtherGroups int      `json:"other_groups,omitempty"`
	OtherNodes  int      `json:"other_nodes,omitempty"`
	Skipped     []string `json:"skipped,omitempty"` // as DeclareResult.Skipped
}

// PlanGroup is the nodes one change applies to, and the change.
type PlanGroup struct {
	Count int `json:"count"` // nodes in the group
	// Nodes lists them in id order with the version each would get: all Count of
	// them unless Truncated.
	Nodes     []Assignment `json:"nodes"`
	Added     []PlanFile   `json:"added,omitempty"`
	Changed   []PlanChange `json:"changed,omitempty"`
	Removed   []PlanFile   `json:"removed,omitempty"`
	Unchanged int          `json:"unchanged"` // files the same in every respect
	// AddedCount, ChangedCount and RemovedCount are whole when the lists are cut.
	AddedCount   int `json:"added_count"`
	ChangedCount int `json:"changed_count"`
	RemovedCount int `json:"removed_count"`
	// Truncated: a list of this group was cut to keep the answer within MaxPlanSize.
	Truncated bool `json:"truncated,omitempty"`
}

// PlanFile is a file as a plan shows it: never its content.
type PlanFile struct {
	Path  string `json:"path,omitempty"` // empty in a PlanChange's From and To
	Mode  string `json:"mode"`           // four octal digits, as the host applies it
	Size  int    `json:"size"`
	Owner string `json:"owner,omitempty"`
	Group string `json:"group,omitempty"`
}

// What a PlanChange changes.
const (
	PlanContent = "content"
	PlanMode    = "mode"
	PlanOwner   = "owner"
	PlanGroupOf = "group"
)

// PlanChange is a file declared before and after, changed: What lists PlanContent,
// PlanMode, PlanOwner and PlanGroupOf, those that differ, in that order.
type PlanChange struct {
	Path string   `json:"path"`
	What []string `json:"what"`
	From PlanFile `json:"from"`
	To   PlanFile `json:"to"`
}

// ProgressRequest asks where the named nodes stand against the versions declared
// for them: what `declare --wait` polls. At most MaxNodesPage targets a request;
// the answer may cover only the first of them (ProgressResult.Left).
type ProgressRequest struct {
	Targets []Assignment `json:"targets"`
	// Body, when set, is the digest of the body the targets were declared
	// (DeclareResult.Body): a target since declared another body is superseded.
	// Left out (a control plane older than it gave none), nothing is superseded.
	Body string `json:"body,omitempty"`
}

// Progress states of a target that has not converged (applied the version or a
// later one).
const (
	ProgressFailed  = "failed"  // reported an error for the version, or a later one; or a hook of what it applied failed
	ProgressOffline = "offline" // not connected: it will not apply it now
	// ProgressRevoked: revoked since (TargetProgress.RevokedAt): it never will.
	// meshctl before it takes it for pending, and waits on.
	ProgressRevoked = "revoked"
	ProgressPending = "pending" // connected, not applied yet
	// ProgressSuperseded: a later declaration gave the node another body, which it
	// is to hold instead (ProgressRequest.Body); TargetProgress.Version names it.
	ProgressSuperseded = "superseded"
)

// TargetProgress is one target's standing.
type TargetProgress struct {
	Node    string       `json:"node"`
	State   string       `json:"state"`
	Error   *StatusError `json:"error,omitempty"`   // for failed
	Version uint64       `json:"version,omitempty"` // for superseded: the version declared since
	// RevokedAt is when a revoked target was revoked.
	RevokedAt time.Time `json:"revoked_at,omitzero"`
}

// ProgressResult counts the targets that converged and lists the others, in the
// request's order; an unknown node is offline. A fleet's answer shrinks as it
// converges.
type ProgressResult struct {
	Converged int              `json:"converged"`
	Others    []TargetProgress `json:"others"`
	// Left counts the targets at the end of the request this answer does not
	// cover: the answer for all of them would not fit in one message (2,000
	// failures with long messages). The first len(Targets)-Left are answered for,
	// at least one; ask about the rest again. A control plane older than it
	// answers for every target, or (past the message cap) not at all.
	Left int `json:"left,omitempty"`
}

// NodesRequest asks for the roster; Nodes filters it when set.
type NodesRequest struct {
	Nodes []string `json:"nodes,omitempty"`
	// After and Limit page through the roster in node id order: a page holds the
	// nodes after the given id, at most Limit of them (0: the control plane's page).
	After string `json:"after,omitempty"`
	Limit int    `json:"limit,omitempty"`
}

// MaxNodesPage is the most nodes one reply carries: a fleet's roster would exceed
// the broker's message cap in one piece. A page holds fewer when that many would
// not fit in one message (nodes failing with long messages, many labels): the
// control plane cuts it by size too, and Next says where the next one starts.
const MaxNodesPage = 2000

// NodeView is one node as operators see it.
type NodeView struct {
	ID         string            `json:"id"`
	Role       string            `json:"role"`
	Labels     map[string]string `json:"labels,omitempty"`
	PublicKey  string            `json:"public_key"`
	EnrolledAt time.Time         `json:"enrolled_at"`
	State      string            `json:"state"` // alive, offline, revoked
	LastSeen   time.Time         `json:"last_seen,omitzero"`
	Declared   uint64            `json:"declared_version"`
	Applied    *uint64           `json:"applied_version"` // nil until the node applied anything
	Converged  bool              `json:"converged"`
	Stale      bool              `json:"stale,omitempty"`
	// HooksRunning: the host's hooks for what it applied are queued or running;
	// it is not converged until they ran (a failure is its LastError, hook_failed).
	HooksRunning   bool         `json:"hooks_running,omitempty"`
	LastError      *StatusError `json:"last_error,omitempty"`
	KeyringEpoch   uint64       `json:"keyring_epoch"`
	DeclaredExpiry time.Time    `json:"declared_expires_at"`
	// DeclaredBody is the digest of the body declared to the node (what `declare`
	// answers as its body), and DeclaredAt when it was declared: which nodes a
	// rollout reached, and which have not applied it, after `declare --wait` ended.
	// Control planes older than these fields send neither.
	DeclaredBody string    `json:"declared_body,omitempty"`
	DeclaredAt   time.Time `json:"declared_at,omitzero"`
	RevokedAt    time.Time `json:"revoked_at,omitzero"`
	// Agent is the agent the node last reported ("meshhost/VERSION", ValidAgent);
	// empty while it reported none this control plane keeps, or from a control
	// plane older than this field.
	Agent string `json:"agent,omitempty"`
	// PutBack counts the managed files the node's agent found changed or removed
	// on the host (by hand, by another program) and put back as declared since it
	// started; LastPutBackAt is when it last did, by the host's clock. The leader
	// keeps them from the node's reports, not in the replicated state: a new leader
	// shows them again from each node's next report (within a heartbeat).
	PutBack       uint64    `json:"put_back,omitempty"`
	LastPutBackAt time.Time `json:"last_put_back_at,omitzero"`
	// Connections counts the connections open with the node's key on every broker
	// of the mesh (left out while it is one or none). More than one is a
	// reconnection the broker has not noticed the end of yet (SharedKeyGrace at
	// most), or a second machine holding the node's key: one cloned after its
	// enrolment.
	Connections int `json:"connections,omitempty"`
	// SharedSince is when the node's key came to be held by more than one
	// connection at once, as the answering control node saw it (left out while it
	// is one or none). Past SharedKeyGrace the node is failing KeyShared.
	SharedSince time.Time `json:"shared_since,omitzero"`
}

// Node states in a NodeView.
const (
	StateAlive   = "alive"
	StateOffline = "offline"
	StateRevoked = "revoked"
	StateRemoved = "removed"
)

// NodesResult is the roster.
type NodesResult struct {
	Mesh         string        `json:"mesh"`
	AnsweredBy   string        `json:"answered_by"`
	KeyringEpoch uint64        `json:"keyring_epoch"`
	Control      []ControlView `json:"control"`
	Nodes        []NodeView    `json:"nodes"`
	// Next is the id to ask for the following page After; empty on the last page.
	Next string `json:"next,omitempty"`
	// At is the answering control node's clock as it answered (older control
	// planes send none): the times above are its own, and how long ago a node
	// was last seen is counted from it, not by the reader's clock.
	At time.Time `json:"at,omitzero"`
	// SharedKeyGrace is how long a node's key may be held by more than one
	// connection before the node is failing KeyShared, as the answering control
	// node runs (serve --shared-key-grace); zero from older control planes.
	SharedKeyGrace Duration `json:"shared_key_grace,omitempty"`
}

// RevokeRequest revokes nodes for good.
type RevokeRequest struct {
	// Node names one node; Nodes several, revoked in one commit. Either or both.
	Node  string   `json:"node,omitempty"`
	Nodes []string `json:"nodes,omitempty"`
	// Key, with one node named, revokes it only if it holds this key (its nkey
	// public key, as nodes shows it): a command run again after the id enrolled
	// another machine is refused (CodeKeyMismatch) instead of revoking that one.
	// Checked by the leader against its state as it proposes the revocation, and
	// again as the revocation commits (state.RulesRevokeByKey). A control plane
	// older than it refuses the member (bad_request).
	Key string `json:"key,omitempty"`
}

// MaxRevokeNodes is the most nodes one revoke request names.
const MaxRevokeNodes = 1000

// RevokedNode is one node revoked, and the connections it held open.
type RevokedNode struct {
	Node string `json:"node"`
	// Connections is how many connections the node held open, on every broker of
	// the mesh, when it was revoked. Its agent closes them on the signed notice;
	// the brokers close what is left right after (RevokeGrace).
	Connections int `json:"connections"`
	// AlreadyRevokedAt is set when the node was revoked before this request, by an
	// earlier one: revoking again changes nothing.
	AlreadyRevokedAt time.Time `json:"already_revoked_at,omitzero"`
	// PublicKey and EnrolledAt are the machine revoked: its key, and when it
	// enrolled under the id. A control plane older than them leaves them out.
	PublicKey  string    `json:"public_key,omitempty"`
	EnrolledAt time.Time `json:"enrolled_at,omitzero"`
	// EarlierRevocations is how many times the id was revoked before, under other
	// keys, and EarlierRevokedAt when the last of them was (zero when the mesh
	// does not know): a revocation run again after the id enrolled another machine
	// revokes that one, and says so by these.
	EarlierRevocations int       `json:"earlier_revocations,omitempty"`
	EarlierRevokedAt   time.Time `json:"earlier_revoked_at,omitzero"`
}

// ControlRemoveResult answers control.remove.
type ControlRemoveResult struct {
	// AlreadyRemoved: an earlier request removed the node from the roster and from
	// Raft; nothing was left to do.
	AlreadyRemoved bool `json:"already_removed,omitempty"`
	// PendingTokens are the nodes with a token that can still admit a machine, sorted.
	// Each was minted while the removed node was a member and lists its broker
	// address: a machine answering there with the removed node's certificate (which
	// the token's CA pin accepts) would receive the secret of a machine that tries
	// it first. Cancel and mint them again if the removed machine is suspected.
	PendingTokens []string `json:"pending_tokens,omitempty"`
	// Demoted is the voter made a nonvoter so that the voters stay an odd number
	// (one of three removed leaves two, and two stop when either stops); it is
	// promoted again with the next control node that serves.
	Demoted string `json:"demoted,omitempty"`
	// DemotedNotServing: Demoted does not serve, and was made a nonvoter before the
	// removal, so that the voters left are a quorum that serves (without it, the
	// removal would have stopped the control plane until Demoted came back).
	DemotedNotServing bool `json:"demoted_not_serving,omitempty"`
	// NeverAdmitted: no control node of this id was ever admitted, and its pending
	// control tokens, CancelledTokens, were cancelled instead: none can admit a
	// machine (which would receive the signing key) any more. A control plane
	// older than these fields refuses the request not_found and cancels nothing.
	NeverAdmitted   bool        `json:"never_admitted,omitempty"`
	CancelledTokens []TokenView `json:"cancelled_tokens,omitempty"`
}

// RevokeResult lists the nodes revoked, in the request's order.
type RevokeResult struct {
	Revoked []RevokedNode `json:"revoked"`
	// CancelledTokens lists the pending tokens of the nodes revoked, cancelled with
	// them. A control plane older than this field deletes them and lists none.
	CancelledTokens []TokenView `json:"cancelled_tokens,omitempty"`
}

// LabelRequest sets labels; an empty value removes the label.
type LabelRequest struct {
	Node   string            `json:"node"`
	Labels map[string]string `json:"labels"`
}

// Duration is a time.Duration that travels as text ("15m").
type Duration time.Duration

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}
