// Package api holds the control plane's side of the wire protocol (docs/protocol.md):
// the subjects and the JSON messages exchanged with host agents and with operators.
//
// The host agent defines the host-facing messages again on its own side, because it
// imports nothing of the control plane; golden JSON vectors in both packages' testdata
// keep the two definitions in step.
package api

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ProtocolVersion is the "v" of every message. Version 2 binds enrolment to a key
// (the enrolling client's nkey and inbox), pushes sync answers on the declaration
// subject, and wraps operator requests in AdminRequest (docs/protocol.md).
const ProtocolVersion = 2

// Subject names. Node ids never contain '.', '*' or '>' (see tokenfmt), so they are
// safe as subject tokens.
const (
	EnrolPrefix = "mesh.enrol."
	NodePrefix  = "mesh.node."
	AdminPrefix = "mesh.admin."
	// RetiredPrefix is where the control account serves the reads that the operator
	// credentials of removed control nodes send on AdminPrefix (the broker renames
	// them), apart from every active operator's requests.
	RetiredPrefix    = "mesh.retired."
	ControlPrefix    = "mesh.control."
	NodeInboxPrefix  = "_INBOX.node."
	EnrolInboxPrefix = "_INBOX.enrol."
	// OperatorInboxPrefix starts the inbox of an operator's connection, followed by
	// its user key (OperatorInbox).
	OperatorInboxPrefix = "_INBOX.op."
	DeclarationSuffix   = ".decl"
	StatusSuffix        = ".status"
	SyncSuffix          = ".sync"
)

// EnrolSubject is where an enrolling client for node sent its request before
// EnrolKeySubject; still served for clients of that time. Every client enrolling
// node, with whatever token, shares its budget.
func EnrolSubject(node string) string { return EnrolPrefix + node }

// EnrolKeySubject is where a client enrolling node with the node key key sends its
// request. The broker lets only the connection that proved key publish there, so
// its budget is that client's alone: a client holding some other token cannot spend
// it (docs/security.md).
func EnrolKeySubject(node, key string) string { return EnrolPrefix + node + "." + key }

// DeclarationSubject is where node receives its envelopes.
func DeclarationSubject(node string) string { return NodePrefix + node + DeclarationSuffix }

// StatusSubject is where node publishes its status.
func StatusSubject(node string) string { return NodePrefix + node + StatusSuffix }

// SyncSubject is where node asks for its current declaration.
func SyncSubject(node string) string { return NodePrefix + node + SyncSuffix }

// NodeInbox is the inbox prefix a node's replies come to.
func NodeInbox(node string) string { return NodeInboxPrefix + node }

// EnrolInbox is the inbox prefix of a client enrolling node with the node key key:
// the broker lets only the connection that proved key subscribe there, so the reply
// reaches the connection that asked and nobody else.
func EnrolInbox(node, key string) string { return EnrolInboxPrefix + node + "." + key }

// OperatorInbox is the inbox prefix of the operator connection whose credentials'
// user key is key: meshctl's replies come under it, and the credentials of a removed
// control node may read nothing else (authn.RemovedOperatorGrant).
func OperatorInbox(key string) string { return OperatorInboxPrefix + key }

// Subjects tells a node where it talks.
type Subjects struct {
	Declarations string `json:"declarations"`
	Status       string `json:"status"`
	Sync         string `json:"sync"`
	InboxPrefix  string `json:"inbox_prefix"`
}

// SubjectsFor returns the subjects of node.
func SubjectsFor(node string) Subjects {
	return Subjects{
		Declarations: DeclarationSubject(node),
		Status:       StatusSubject(node),
		Sync:         SyncSubject(node),
		InboxPrefix:  NodeInbox(node),
	}
}

// Error is a refusal with a stable code.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Message }

// Enrolment refusal codes (docs/protocol.md).
const (
	CodeTokenUnknown   = "token_unknown"
	CodeTokenUsed      = "token_used"
	CodeTokenExpired   = "token_expired"
	CodeTokenOtherNode = "token_other_node"
	CodeTokenWrongRole = "token_wrong_role"
	CodeBadRequest     = "bad_request"
	CodeUnavailable    = "unavailable"
	CodeNodeExists     = "node_exists"
	CodeKeyRevoked     = "key_revoked"
	CodeNotFound       = "not_found"
	CodeInternal       = "internal"
	// CodeTokenOtherMesh: the token's CA pin is not this mesh's.
	CodeTokenOtherMesh = "token_other_mesh"
	// CodeTokenStaleKey: the token's signing key is no longer in the mesh's keyring
	// (rotated and retired since it was minted).
	CodeTokenStaleKey = "token_stale_key"
	// CodeTokenCancelled: an operator cancelled the token before it was used.
	CodeTokenCancelled = "token_cancelled"
	// CodeKeyInUse: the presented key is already enrolled as another node (not
	// revoked); a key identifies one node only.
	CodeKeyInUse = "key_in_use"
	// CodeDiskFull: the control node could not write its Raft log because its disk
	// is full; nothing was committed, and the operator frees space before retrying.
	CodeDiskFull = "disk_full"
	// CodeNotCAHolder: a control token was asked for without the mesh CA's signature
	// over its claim; control tokens are minted where the CA key is.
	CodeNotCAHolder = "not_ca_holder"
	// CodeOlderControlNode: a control node that serves applies the replicated log by
	// older rules than the request needs (an upgrade under way); upgrade it first.
	CodeOlderControlNode = "older_control_node"
	// CodeOutOfVersions: a node the declaration reaches was declared the last
	// version there is; the next would wrap around to v0 (state.ErrOutOfVersions).
	CodeOutOfVersions = "out_of_versions"
	// CodeTokenPending: a token was asked for a node that has a pending one; the
	// operator uses it, cancels it, or mints with --replace (state.ErrTokenPending).
	CodeTokenPending = "token_pending"
	// CodeNodeRevoked: labels were set on a revoked node (state.ErrNodeRevoked).
	CodeNodeRevoked = "node_revoked"
	// CodeKeyMismatch: a revocation that names the key to revoke (`meshctl revoke
	// --key`) found another key under the node id: another machine enrolled under
	// it since; nothing was revoked.
	CodeKeyMismatch = "key_mismatch"
	// CodeTooLarge: the answer would not fit in one message of the broker's (its
	// message cap, max_payload), and the control plane sent this instead of
	// nothing. A read asks for less at a time: a smaller NodesRequest.Limit, fewer
	// ProgressRequest.Targets (the operator client halves them by itself). A change
	// was carried out all the same: only its answer is missing.
	CodeTooLarge = "too_large"
	// CodeOperatorExists: operator credentials issued under the name are still
	// valid (state.ErrOperatorExists); nothing was recorded.
	CodeOperatorExists = "operator_exists"
	// CodeCredentialsNotValid: an operator change signed by credentials the
	// control plane no longer admits (revoked, expired, a removed control node's,
	// unrecorded); nothing was done. Such credentials reach the leader only
	// through a broker whose state has not applied the revocation yet, or a change
	// that waited its turn behind it (decision 0042).
	CodeCredentialsNotValid = "credentials_not_valid"
	// CodeNotSigned: an operator change whose signature does not verify, or, on a
	// control plane that serves with --require-signed-changes, one not signed or
	// signed too far from the control node's clock; nothing was done.
	CodeNotSigned = "not_signed"
)

// Codes a host reports in a status's error besides the verifier's
// (declarations.Code): the host's own failures after a declaration verified.
const (
	// StatusApplyFailed: the file applier could not apply the declaration; the
	// host tries again by itself.
	StatusApplyFailed = "apply_failed"
	// StatusHookFailed: a local hook failed; the declaration stays applied.
	StatusHookFailed = "hook_failed"
	// StatusStateNotSaved: the host could not persist its applied state.
	StatusStateNotSaved = "state_not_saved"
)

// UnsignableBody is no host's status code: the control plane shows it for a node
// whose declared body it cannot sign again (declared by an older meshctl whose
// rules took it), so that the node, which never hears of it, is failing.
const UnsignableBody = "unsignable_body"

// KeyShared is no host's status code either: the control plane shows it for a node
// whose key more than one connection has held at once for longer than a reconnection
// lasts (SharedKeyGrace by default): a second machine holds the key, one cloned
// after its enrolment. The two are one node to the mesh; each applies every
// declaration, and their reports overwrite each other, so the node is failing
// until it is revoked and each machine enrolled again.
const KeyShared = "key_shared"

// KeyringGone is no host's status code: the control plane shows it for a node whose
// keyring epoch is older than the chain of keyrings the mesh keeps reaches
// (state.MaxKeyringHistory epochs, 32 rotations): the node cannot follow the signing
// keys any more and refuses all the mesh sends it, so it is failing until it is
// enrolled again. Nothing is re-sent to it meanwhile.
const KeyringGone = "keyring_gone"

// ControlPlaneVerdicts are the codes the control plane shows of a node on its own
// judgement (UnsignableBody, KeyShared, KeyringGone): a host's report naming one is
// dropped, or status would tell the operator to act on the host's word.
func ControlPlaneVerdicts() []string { return []string{UnsignableBody, KeyShared, KeyringGone} }

// SharedKeyGrace is how long a node's key may be held by more than one connection
// at once before the control plane counts it as held by two machines (KeyShared).
// An agent that reconnects while its broker has not yet seen the old connection end
// holds two for a while: a broker closes a client it no longer hears from after
// three unanswered pings 20 s apart, 100 s after the last it heard at most. Two
// minutes is past that.
const SharedKeyGrace = 2 * time.Minute

// EnrolRequest is what an enrolling host sends.
type EnrolRequest struct {
	V    int    `json:"v"`
	Mesh string `json:"mesh"`
	Node string `json:"node"`
	Role string `json:"role"`
	// Secret is the token's secret (hex; never logged), sent by clients older than
	// decision 0018. Clients since send TokenID and TokenProof instead: the secret
	// never leaves their machine.
	Secret string `json:"secret,omitempty"`
	// TokenID is the token's id (hex SecretHash); TokenProof (base64) is the proof
	// the secret's key signed over tokenfmt.ProofMessage(Mesh, Node, PublicKey).
	TokenID    string `json:"token_id,omitempty"`
	TokenProof string `json:"token_proof,omitempty"`
	PublicKey  string `json:"public_key"` // nkey user public key
	KeyProof   string `json:"key_proof"`  // base64 signature by that key over KeyProofMessage
	// CAPin and SigningKey are what the host read from its token (hex): the mesh
	// refuses, before anything is consumed, a token that is not its own.
	CAPin      string `json:"ca_pin"`
	SigningKey string `json:"signing_key"`
	Agent      string `json:"agent,omitempty"`
	// CurveKey is a joining control node's public curve key: the signing key is
	// sealed to it.
	CurveKey string `json:"curve_key,omitempty"`
	// Rules is the revision of the rules a joining control node's meshctl
	// applies the log by (state.ApplyRules); joins before it send none. The mesh
	// refuses a join older than the rules its state was built by: the joiner
	// would stop at the first entry it cannot apply, and the join be rolled back
	// as "not replicating".
	Rules int `json:"rules,omitempty"`
}

// enrolPasswordPrefix marks the CONNECT password of an enrolling client that proves
// its token's secret rather than sending it.
const enrolPasswordPrefix = "proof1."

// EnrolPassword is the CONNECT password of an enrolling client: the token's id (hex
// SecretHash) and the proof its secret's key signed (tokenfmt.Token.Prove), never
// the secret itself (decision 0018).
func EnrolPassword(tokenID string, proof []byte) string {
	return enrolPasswordPrefix + tokenID + "." + base64.RawURLEncoding.EncodeToString(proof)
}

// ParseEnrolPassword splits an EnrolPassword; ok is false for anything else (a bare
// secret from an older client, or garbage).
func ParseEnrolPassword(pw string) (tokenID string, proof []byte, ok bool) {
	rest, found := strings.CutPrefix(pw, enrolPasswordPrefix)
	if !found {
		return "", nil, false
	}
	id, enc, found := strings.Cut(rest, ".")
	// The exact length also keeps out the line breaks base64 decoders skip.
	if !found || len(id) != 64 || len(enc) != base64.RawURLEncoding.EncodedLen(64) {
		return "", nil, false
	}
	if _, err := hex.DecodeString(id); err != nil {
		return "", nil, false
	}
	proof, err := base64.RawURLEncoding.Strict().DecodeString(enc)
	if err != nil || len(proof) != 64 {
		return "", nil, false
	}
	return strings.ToLower(id), proof, true
}

// KeyProofMessage is what a joiner signs with its new key to prove it holds it.
func KeyProofMessage(mesh, node, publicKey string) []byte {
	return []byte("mesh-enrol-v1\x00" + mesh + "\x00" + node + "\x00" + publicKey)
}

// EnrolResponse answers an EnrolRequest.
type EnrolResponse struct {
	V           int             `json:"v"`
	OK          bool            `json:"ok"`
	Error       *Error          `json:"error,omitempty"`
	Mesh        string          `json:"mesh,omitempty"`
	Node        string          `json:"node,omitempty"`
	Role        string          `json:"role,omitempty"`
	CAPEM       string          `json:"ca_pem,omitempty"`
	Brokers     []string        `json:"brokers,omitempty"`
	Subjects    *Subjects       `json:"subjects,omitempty"`
	Keyring     json.RawMessage `json:"keyring,omitempty"`
	Declaration json.RawMessage `json:"declaration,omitempty"`
	// Membership is the signed list of the mesh's brokers the node follows.
	Membership json.RawMessage `json:"membership,omitempty"`
	// Control is set when a control node is admitted.
	Control *ControlAdmission `json:"control,omitempty"`
}

// ControlMember is a control node's addresses.
type ControlMember struct {
	ID      string `json:"id"`
	Broker  string `json:"broker"`
	Raft    string `json:"raft"`
	Cluster string `json:"cluster"`
	// Pin and Operator, in a control token's creation only, name the TLS key and the
	// operator credentials the CA holder issued for the node, ClaimExpiry when the
	// CA's claim stops admitting the token, and Proof is the CA's signature over that
	// claim (TokenCreateRequest.ControlClaim). A control plane older than
	// ClaimExpiry refuses the request as an unknown member; one of this version
	// refuses a request without it, an older meshctl's, whose claim (version 1)
	// did not cover the token's proof key.
	Pin         string    `json:"pin,omitempty"`
	Operator    string    `json:"operator,omitempty"`
	Proof       []byte    `json:"proof,omitempty"`
	ClaimExpiry time.Time `json:"claim_expiry,omitzero"`
}

// ControlAdmission is what a joining control node receives.
type ControlAdmission struct {
	// Sealed is its TLS identity and operator credentials, sealed under a key
	// derived from the token secret when the token was minted on the CA holder.
	Sealed []byte `json:"sealed"`
	// SigningKey is the declaration signing key (PKCS#8 PEM), sealed to the
	// joiner's curve key by Sealer, a one-time curve key of the admitting node.
	SigningKey   []byte          `json:"signing_key"`
	Sealer       string          `json:"sealer"`
	AdminAccount string          `json:"admin_account"`
	CAHolder     string          `json:"ca_holder"`
	Self         ControlMember   `json:"self"`
	Members      []ControlMember `json:"members"`
}

// SyncRequest asks for a node's current declaration.
type SyncRequest struct {
	V              int    `json:"v"`
	AppliedVersion uint64 `json:"applied_version"`
	KeyringEpoch   uint64 `json:"keyring_epoch"`
	// MembershipVersion is the version of the signed list of brokers the node
	// holds (0: none); a newer one is sent with the rest.
	MembershipVersion uint64 `json:"membership_version"`
	// HaveApplied and AppliedExpiresAt say which declaration the node holds
	// applied (AppliedVersion) and until when it is valid: see HasDeclared.
	HaveApplied      bool      `json:"have_applied,omitempty"`
	AppliedExpiresAt time.Time `json:"applied_expires_at,omitzero"`
	// BatchProofs: the agent verifies declarations signed in a batch (one
	// signature over a tree of many nodes' declarations, the envelope carrying
	// its node's proof: decision 0034). Agents before it never send it, and are
	// sent declarations signed one by one.
	BatchProofs bool `json:"batch_proofs,omitempty"`
	// Key is the node's public key (a U... nkey). A revoked key's sync is sent
	// the notice of that key's revocation alone, not one for each time the id was
	// revoked; a node not revoked is served alike with it or without. Agents
	// before it never send it, and are sent every notice of the id.
	Key string `json:"key,omitempty"`
}

// HasDeclared reports whether the node already holds, applied, the declaration
// version whose validity ends at expires, or a copy of it valid as long: then a
// sync need not send it again. A node's versions never restart and each names one
// body, so the version says which declaration it is. A node that claims more than
// it holds only deprives itself (and a broker that forges the claim could as well
// drop the envelope).
func (r SyncRequest) HasDeclared(version uint64, expires time.Time) bool {
	return r.HaveApplied && r.AppliedVersion == version && !r.AppliedExpiresAt.Before(expires)
}

// SyncResponse acknowledges a sync: the signed envelopes themselves (the chain of
// keyrings after the epoch the host reported, oldest first, then its declaration)
// were published on the node's declaration subject just before, in that order.
// Replies stay small: the hosts account caps every message a connection in it
// publishes, the control plane's included.
type SyncResponse struct {
	V     int    `json:"v"`
	Error *Error `json:"error,omitempty"`
	// Sent is how many envelopes were published on the declaration subject.
	Sent int `json:"sent,omitempty"`
}

// SyncHeader carries a sync request's tag (host/wire.SyncHeader, the same): the
// control plane puts it on every envelope it publishes for that sync and on the
// acknowledgement, so that the agent tells them from declarations pushed meanwhile.
const SyncHeader = "Mesh-Sync"

// MaxSyncTag bounds a sync tag: decimal digits, as the agent numbers its syncs. A
// tag that is not one is ignored (the node's own subjects only carry it back).
const MaxSyncTag = 20

// StatusError is the error part of a status report.
type StatusError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Version uint64 `json:"version,omitempty"`
	// RetryAt is when the agent tries again to apply a declaration that failed.
	RetryAt time.Time `json:"retry_at,omitzero"`
}

// Status is what a node reports after handling a declaration, and as its heartbeat.
type Status struct {
	V              int    `json:"v"`
	Node           string `json:"node"`
	HaveApplied    bool   `json:"have_applied"`
	AppliedVersion uint64 `json:"applied_version"`
	KeyringEpoch   uint64 `json:"keyring_epoch"`
	Stale          bool   `json:"stale,omitempty"`
	// HooksRunning: hooks of the applied declaration are queued or running on
	// the host; it has not converged until they ran (hook_failed if one failed). Hosts
	// before this field never send it.
	HooksRunning bool         `json:"hooks_running,omitempty"`
	Error        *StatusError `json:"error,omitempty"`
	Agent        string       `json:"agent,omitempty"`
	// PutBack counts the managed files the agent found changed or removed on the
	// host (by hand, by another program) and put back as declared since it started;
	// LastPutBackAt is when it last did, by the host's clock. Agents before these
	// fields never send them.
	PutBack       uint64    `json:"put_back,omitempty"`
	LastPutBackAt time.Time `json:"last_put_back_at,omitzero"`
	// BatchProofs is the sync request's BatchProofs, said in every report so that
	// the control plane's record of the node holds it for a fan-out.
	BatchProofs bool `json:"batch_proofs,omitempty"`
	// HeartbeatSeconds is how often the agent reports when nothing changes, in
	// whole seconds (0: not said, an agent before it). The leader counts a node
	// offline after three of them without a report, or after --offline-after if
	// that is longer; above MaxHeartbeat it is taken as MaxHeartbeat.
	HeartbeatSeconds uint32 `json:"heartbeat_seconds,omitempty"`
}

// MaxHeartbeat is the longest report interval an agent may have (meshhost run
// --heartbeat takes 1s to 10m). A report saying more counts as this, so that a
// host cannot keep its silent connection counted alive for longer.
const MaxHeartbeat = 10 * time.Minute

// StatusAnswer is what the control plane answers a status report that names a
// reply subject (under the node's inbox), and only when it has something to tell
// the node: a report is a heartbeat, and a fleet's would otherwise each be
// answered. Agents before it name no reply subject and are told nothing; control
// planes before it never answer.
type StatusAnswer struct {
	V int `json:"v"`
	// SharedKey lists the connections that hold the node's key on the mesh's
	// brokers, the oldest first, when more than one has held it for longer than
	// SharedKeyGrace: another machine holds it. The agent finds its own among
	// them by its broker's server id and its connection id there.
	SharedKey []KeyHolder `json:"shared_key,omitempty"`
}

// KeyHolder is one connection holding a node's key.
type KeyHolder struct {
	// Server is the id of the broker holding it (nats-server's), CID the
	// connection's id there: what the broker told the client as it connected.
	Server string `json:"server"`
	CID    uint64 `json:"cid"`
	// Addr is the client's address as the broker sees it (an IP), "" when unknown.
	Addr string `json:"addr,omitempty"`
	// Since is when the control plane first saw the connection.
	Since time.Time `json:"since,omitzero"`
}

// MaxReplySize is the largest reply a host agent reads (host/wire.MaxReplySize, its
// own definition): an answer to a host must fit it, and the hosts account's cap on
// what the control plane publishes there.
const MaxReplySize = 64 << 10

// MaxMessageSize caps any message the control plane decodes from a node or an
// enrolling client; a declaration envelope is at most 1 MiB and nothing else is near.
const MaxMessageSize = 64 << 10

// Decode's errors, one per way a message can be refused.
var (
	// ErrTooLarge is returned for a message over MaxMessageSize; it is not parsed.
	ErrTooLarge = errors.New("message exceeds the size cap")
	// ErrMalformed is returned for a message that is not the JSON expected.
	ErrMalformed = errors.New("malformed message")
	// ErrVersion is returned for a message of another protocol version.
	ErrVersion = errors.New("unsupported protocol version")
)

// Message is a protocol message the control plane receives.
type Message interface {
	EnrolRequest | SyncRequest | Status
	protocolVersion() int
	// check reports what the JSON decoder lets through but the control plane cannot
	// use.
	check() error
}

func (r EnrolRequest) protocolVersion() int { return r.V }
func (r SyncRequest) protocolVersion() int  { return r.V }
func (s Status) protocolVersion() int       { return s.V }

func (r EnrolRequest) check() error { return nil }

func (r SyncRequest) check() error {
	if !encodableUTC(r.AppliedExpiresAt) {
		return errors.New("applied_expires_at is outside the years 0 to 9999 in UTC")
	}
	return nil
}

func (s Status) check() error {
	if s.Error != nil && !encodableUTC(s.Error.RetryAt) {
		return errors.New("error.retry_at is outside the years 0 to 9999 in UTC")
	}
	if !encodableUTC(s.LastPutBackAt) {
		// Kept in memory and shown in every operator's nodes answer, which
		// could not be written.
		return errors.New("last_put_back_at is outside the years 0 to 9999 in UTC")
	}
	return nil
}

// encodableUTC reports whether t, taken to UTC, can be written as JSON again. A time
// the decoder accepts can fall outside the years 0 to 9999 once its offset is
// applied ("0000-01-01T00:00:00+23:59"), and encoding/json refuses to write such a
// time: a report carrying one into a Raft command would fail the whole command.
func encodableUTC(t time.Time) bool {
	y := t.UTC().Year()
	return 0 <= y && y <= 9999
}

// Decode parses a message from the network: size capped, then JSON, then the version
// checked. Unknown fields are ignored so that additions within a version stay
// compatible; anything incompatible bumps the version.
func Decode[T Message](data []byte) (T, error) {
	var m T
	if len(data) > MaxMessageSize {
		return m, fmt.Errorf("%w: %d bytes, the cap is %d", ErrTooLarge, len(data), MaxMessageSize)
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if v := m.protocolVersion(); v != ProtocolVersion {
		return m, fmt.Errorf("%w %d (this control plane speaks %d)", ErrVersion, v, ProtocolVersion)
	}
	if err := m.check(); err != nil {
		return m, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return m, nil
}
