// Package wire is the host agent's side of the wire protocol (docs/protocol.md): the
// subjects an enrolling host uses and the JSON messages it exchanges with the control
// plane.
//
// The control plane defines the same messages in controlplane/api. The host imports
// nothing of the control plane, so the two are held together by golden JSON vectors
// that both sides' tests decode (testdata/golden.json here, and its copy there).
package wire

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// ProtocolVersion is the "v" of every message this agent speaks.
const ProtocolVersion = 2

// MaxReplySize caps a reply the agent decodes. The broker caps every message
// published in the hosts account at 64 KiB, the mesh's replies included; the largest
// reply (an enrolment: a certificate, a keyring and the first, empty declaration) is a
// few KiB.
const MaxReplySize = 64 << 10

// MaxStatusSize is the most a status report may be, in bytes: the control plane drops
// a larger one and disconnects the node (docs/protocol.md, "Budgets"), so an agent
// whose report grew past it would reconnect and be cut off again with every report.
const MaxStatusSize = 8 << 10

// MaxStatusMessage is the most of a status error's message the control plane keeps, in
// bytes; the agent sends no more than that.
const MaxStatusMessage = 512

// EnrolKeySubject is where a client enrolling node with the node key key sends its
// request. The broker lets only the connection that proved key publish there, so no
// other client can spend the budget of requests it has there.
func EnrolKeySubject(node, key string) string { return "mesh.enrol." + node + "." + key }

// EnrolInbox is the inbox prefix of a client enrolling node with the node key key.
// The broker lets only the connection that proved key subscribe there, so the mesh's
// answer reaches this client and nobody else.
func EnrolInbox(node, key string) string { return "_INBOX.enrol." + node + "." + key }

// EnrolUser is the user name an enrolling client presents; its password is the token
// secret.
func EnrolUser(node string) string { return "enrol:" + node }

// EnrolPassword is the CONNECT password of an enrolling agent: the token's id (hex
// SecretHash) and the proof its secret's key signed (token.Token.Prove), never the
// secret itself (decision 0018 of the mesh).
func EnrolPassword(tokenID string, proof []byte) string {
	return "proof1." + tokenID + "." + base64.RawURLEncoding.EncodeToString(proof)
}

// KeyProofMessage is what a joiner signs with its new key.
func KeyProofMessage(mesh, node, publicKey string) []byte {
	return []byte("mesh-enrol-v1\x00" + mesh + "\x00" + node + "\x00" + publicKey)
}

// Error is a refusal with a stable code.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Refusal codes the agent acts on.
const (
	CodeTokenUnknown   = "token_unknown"
	CodeTokenUsed      = "token_used"
	CodeTokenExpired   = "token_expired"
	CodeTokenOtherNode = "token_other_node"
	CodeTokenWrongRole = "token_wrong_role"
	CodeNodeExists     = "node_exists"
	CodeKeyRevoked     = "key_revoked"
	CodeBadRequest     = "bad_request"
	CodeUnavailable    = "unavailable"
	CodeNotFound       = "not_found"
	CodeTokenOtherMesh = "token_other_mesh"
	CodeTokenStaleKey  = "token_stale_key"
	CodeTokenCancelled = "token_cancelled"
	CodeKeyInUse       = "key_in_use"
	// CodeInternal: the control plane failed to answer (its log says why). An
	// enrolment it refuses so may have been committed: the same token and key
	// sent again are answered from the state.
	CodeInternal = "internal"
)

// Codes the agent reports in a status's error besides the verifier's
// (declarations.Code): its own failures after a declaration verified.
const (
	// StatusApplyFailed: the file applier could not apply the declaration; the
	// agent tries again by itself.
	StatusApplyFailed = "apply_failed"
	// StatusHookFailed: a local hook failed; the declaration stays applied.
	StatusHookFailed = "hook_failed"
	// StatusStateNotSaved: the agent could not persist its applied state.
	StatusStateNotSaved = "state_not_saved"
)

// EnrolRequest is what the agent sends to enrol.
type EnrolRequest struct {
	V    int    `json:"v"`
	Mesh string `json:"mesh"`
	Node string `json:"node"`
	Role string `json:"role"`
	// TokenID (hex SecretHash) and TokenProof (base64, token.Token.Prove over the
	// mesh, the node and PublicKey) stand for the token: its secret never leaves
	// this machine.
	TokenID    string `json:"token_id"`
	TokenProof string `json:"token_proof"`
	PublicKey  string `json:"public_key"`
	KeyProof   string `json:"key_proof"`
	// CAPin and SigningKey are what the token says (hex): the mesh refuses a token
	// that is not its own before it consumes it.
	CAPin      string `json:"ca_pin"`
	SigningKey string `json:"signing_key"`
	Agent      string `json:"agent,omitempty"`
}

// Subjects tells the node where it talks.
type Subjects struct {
	Declarations string `json:"declarations"`
	Status       string `json:"status"`
	Sync         string `json:"sync"`
	InboxPrefix  string `json:"inbox_prefix"`
}

// NodeSubjects are the subjects of node, as the control plane names them
// (controlplane/api.SubjectsFor; the golden enrolment answer holds both sides to
// them). The enrolment answer carries them unsigned, so the agent takes them only if
// they are exactly these: a node id is a subject token of its own (no '.', '*' or
// '>'), and nothing but the node id varies.
func NodeSubjects(node string) Subjects {
	return Subjects{
		Declarations: "mesh.node." + node + ".decl",
		Status:       "mesh.node." + node + ".status",
		Sync:         "mesh.node." + node + ".sync",
		InboxPrefix:  "_INBOX.node." + node,
	}
}

// EnrolResponse is the mesh's answer.
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
}

// SyncRequest asks for the node's current declaration.
type SyncRequest struct {
	V              int    `json:"v"`
	AppliedVersion uint64 `json:"applied_version"`
	KeyringEpoch   uint64 `json:"keyring_epoch"`
	// MembershipVersion is the version of the signed list of brokers the node
	// holds (0: none); a newer one is sent with the rest.
	MembershipVersion uint64 `json:"membership_version"`
	// HaveApplied and AppliedExpiresAt say which declaration the node holds
	// applied (AppliedVersion) and until when it is valid: the mesh sends the
	// declaration again only if it is another one or valid for longer.
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

// SyncResponse acknowledges a sync. The signed envelopes themselves (the keyrings
// after the agent's epoch, oldest first, then its declaration) arrive on the node's
// declaration subject, where the agent verifies them like any other.
type SyncResponse struct {
	V     int    `json:"v"`
	Error *Error `json:"error,omitempty"`
	// Sent is how many envelopes the mesh published for this sync.
	Sent int `json:"sent,omitempty"`
}

// SyncHeader is the header a sync request carries its tag in (a decimal number the
// agent chooses). A control plane that knows it puts the tag on every envelope it
// publishes for that sync and on its acknowledgement, so that the agent counts the
// sync's envelopes apart from declarations pushed meanwhile; one that does not
// ignores it, and the agent counts every envelope as before.
const SyncHeader = "Mesh-Sync"

// StatusError is the error part of a status report.
type StatusError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Version uint64 `json:"version,omitempty"`
	// RetryAt is when the agent tries again to apply a declaration that failed.
	RetryAt time.Time `json:"retry_at,omitzero"`
}

// Status is the agent's report.
type Status struct {
	V              int    `json:"v"`
	Node           string `json:"node"`
	HaveApplied    bool   `json:"have_applied"`
	AppliedVersion uint64 `json:"applied_version"`
	KeyringEpoch   uint64 `json:"keyring_epoch"`
	Stale          bool   `json:"stale,omitempty"`
	// HooksRunning: hooks of the applied declaration are queued or running; the
	// node has not converged until they ran (hook_failed if one failed).
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
	// HeartbeatSeconds is how often the agent reports when nothing changes
	// (meshhost run --heartbeat), whole seconds rounded up: the control plane
	// counts a node silent for three of them, or its --offline-after if longer,
	// as offline. Agents before it never send it.
	HeartbeatSeconds uint32 `json:"heartbeat_seconds,omitempty"`
}

// StatusAnswer is what the mesh answers a status report that names a reply subject
// (under the node's inbox), and only when it has something to tell the node: a
// report is a heartbeat. A control plane before it never answers.
type StatusAnswer struct {
	V int `json:"v"`
	// SharedKey lists the connections that hold this node's key on the mesh's
	// brokers, the oldest first, when more than one has held it for longer than a
	// reconnection lasts: another machine holds it (one cloned after its
	// enrolment). The agent finds its own among them by its broker's server id and
	// its connection id there.
	SharedKey []KeyHolder `json:"shared_key,omitempty"`
}

// KeyHolder is one connection holding a node's key.
type KeyHolder struct {
	// Server is the id of the broker holding it, CID the connection's id there:
	// what the broker told the client as it connected.
	Server string `json:"server"`
	CID    uint64 `json:"cid"`
	// Addr is the client's address as the broker sees it (an IP), "" when unknown.
	Addr string `json:"addr,omitempty"`
	// Since is when the mesh first saw the connection.
	Since time.Time `json:"since,omitzero"`
}

// DecodeReply's errors. Every refusal is ErrMalformedReply; the two that are not about
// the JSON itself are also ErrReplyTooLarge or ErrReplyVersion, so callers can tell
// "upgrade meshhost" from "the control plane sent garbage".
var (
	// ErrMalformedReply means the control plane's reply could not be understood.
	ErrMalformedReply = errors.New("malformed reply from the control plane")
	// ErrReplyTooLarge means the reply exceeds MaxReplySize; it was not parsed.
	ErrReplyTooLarge = errors.New("reply exceeds the size cap")
	// ErrReplyVersion means the reply speaks another protocol version.
	ErrReplyVersion = errors.New("reply of another protocol version")
)

// Reply is a message the agent receives.
type Reply interface {
	EnrolResponse | SyncResponse | StatusAnswer
}

// DecodeReply parses a reply: size capped, JSON, version checked.
func DecodeReply[T Reply](data []byte) (T, error) {
	var m T
	if len(data) > MaxReplySize {
		return m, fmt.Errorf("%w: %w: %d bytes, the cap is %d", ErrMalformedReply, ErrReplyTooLarge, len(data), MaxReplySize)
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("%w: %v", ErrMalformedReply, err)
	}
	var v struct {
		V int `json:"v"`
	}
	_ = json.Unmarshal(data, &v)
	if v.V != ProtocolVersion {
		return m, fmt.Errorf("%w: %w: version %d; this agent speaks %d (upgrade meshhost)", ErrMalformedReply, ErrReplyVersion, v.V, ProtocolVersion)
	}
	return m, nil
}
