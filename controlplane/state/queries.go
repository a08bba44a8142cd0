package state

import (
	"encoding/json"
	"slices"
	"strings"
	"time"
)

// The queries below answer the broker's authentication hook. It runs for every
// connection, so each takes the read lock once and returns values, never live state.

// NodeAuth is what authentication needs to know of an enrolled node.
type NodeAuth struct {
	ID      string
	Revoked bool
}

// TokenAuth is what authentication needs to know of a minted token.
type TokenAuth struct {
	// ProofKey is the public half of the key the token's secret derives (hex).
	ProofKey string
	Node     string
	Role     string
	// Expiry is when the token stops admitting, as its text says (Token.Deadline).
	Expiry  time.Time
	Used    bool
	UsedKey string
	// Cancelled: an operator cancelled the token; it admits nothing.
	Cancelled bool
}

// AdminAccount returns the account key that issues operator credentials ("" before
// the mesh is initialised).
func (f *FSM) AdminAccount() string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.AdminAccount
}

// NodeByKey returns the node enrolled with key, if any.
func (f *FSM) NodeByKey(key string) (NodeAuth, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	n, ok := f.st.NodeByKey(key)
	if !ok {
		return NodeAuth{}, false
	}
	return NodeAuth{ID: n.ID, Revoked: n.Revoked}, true
}

// KeyRevoked reports whether key belonged to a node the mesh revoked: it stays
// refused even after the node id enrolled again.
func (f *FSM) KeyRevoked(key string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	_, revoked := f.st.RevokedKeys[key]
	return revoked
}

// RevokedKey reports whether key belonged to a node the mesh revoked, and which:
// it stays revoked even after the node id enrolled again.
func (f *FSM) RevokedKey(key string) (node string, revoked bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	node, revoked = f.st.RevokedKeys[key]
	return node, revoked
}

// Revocations returns the keys node was revoked under, each with the time of its
// revocation (zero when the node id has enrolled again since and the time is not
// kept), sorted by key: one for each time the id was revoked.
func (f *FSM) Revocations(node string) []Revocation {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []Revocation
	for _, key := range f.st.revokedOf[node] {
		r := Revocation{Key: key}
		if n, ok := f.st.Nodes[node]; ok && n.Revoked && n.PublicKey == key {
			r.At = n.RevokedAt
		} else if fn, ok := f.st.Forgotten[node]; ok && f.st.ForgottenKey(node) == key {
			r.At = fn.RevokedAt // its last machine's key: the record is forgotten
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Revocation) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// Revocation is a key a node was revoked under.
type Revocation struct {
	Key string
	At  time.Time
}

// OperatorRevoked reports whether key is the operator credentials' key of a removed
// control node, and which.
func (f *FSM) OperatorRevoked(key string) (node string, revoked bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	node, revoked = f.st.RevokedOperators[key]
	return node, revoked
}

// ControlPins is State.ControlPins.
func (f *FSM) ControlPins() (pins, unpinned []string) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.ControlPins()
}

// TokenByID returns the token stored under id (the hash of its secret), if any.
func (f *FSM) TokenByID(id string) (TokenAuth, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	t, ok := f.st.Tokens[id]
	if !ok {
		return TokenAuth{}, false
	}
	return TokenAuth{ProofKey: t.ProofKey, Node: t.Node, Role: t.Role, Expiry: t.Deadline(), Used: !t.UsedAt.IsZero(), UsedKey: t.UsedKey, Cancelled: !t.CancelledAt.IsZero()}, true
}

// The queries below feed the signer. Signing costs tens of microseconds a key, so it
// runs outside the state lock on values copied out under it: Raft's apply and the
// broker's authentication never wait for a fleet's declarations to be signed.

// DeclarationInput is what signing one node's current declaration needs.
type DeclarationInput struct {
	Mesh         string
	Node         string
	NodeKey      string
	Declared     Declared
	KeyringEpoch uint64
	// Body is the declared body's canonical JSON. Stored bodies are never changed
	// in place, so it is shared, not copied.
	Body json.RawMessage
	// BatchProofs: the node's agent takes a declaration signed in a batch
	// (Applied.BatchProofs).
	BatchProofs bool
}

// MembershipInput is what signing the list of brokers needs.
type MembershipInput struct {
	Mesh         string
	Version      uint64
	KeyringEpoch uint64
	Brokers      []string
}

// DeclarationInput returns what signing node's declaration needs; false if the node
// is not enrolled or is revoked.
func (s *State) DeclarationInput(node string) (DeclarationInput, bool) {
	n, ok := s.Nodes[node]
	if !ok || n.Revoked {
		return DeclarationInput{}, false
	}
	return DeclarationInput{Mesh: s.Mesh, Node: n.ID, NodeKey: n.PublicKey, Declared: n.Declared,
		KeyringEpoch: s.Keyring.Epoch, Body: s.Bodies[n.Declared.BodyDigest], BatchProofs: n.Applied.BatchProofs}, true
}

// MembershipInput returns what signing the current list of brokers needs.
func (s *State) MembershipInput() MembershipInput {
	version, brokers := s.Membership()
	return MembershipInput{Mesh: s.Mesh, Version: version, KeyringEpoch: s.Keyring.Epoch, Brokers: brokers}
}

// DeclarationInputs returns, in the order given, the inputs of the nodes that are
// enrolled and not revoked; the others are left out.
func (f *FSM) DeclarationInputs(nodes []string) []DeclarationInput {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]DeclarationInput, 0, len(nodes))
	for _, id := range nodes {
		if in, ok := f.st.DeclarationInput(id); ok {
			out = append(out, in)
		}
	}
	return out
}
