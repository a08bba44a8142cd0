package state

import "time"

// The queries below answer the broker's authentication hook. It runs for every
// connection, so each takes the read lock once and returns values, never live state.

// NodeAuth is what authentication needs to know of an enrolled node.
type NodeAuth struct {
	ID      string
	Revoked bool
}

// TokenAuth is what authentication needs to know of a minted token.
type TokenAuth struct {
	Node    string
	Role    string
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

// TokenByID returns the token stored under id (the hash of its secret), if any.
func (f *FSM) TokenByID(id string) (TokenAuth, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	t, ok := f.st.Tokens[id]
	if !ok {
		return TokenAuth{}, false
	}
	return TokenAuth{Node: t.Node, Role: t.Role, Expiry: t.Expiry, Used: !t.UsedAt.IsZero(), UsedKey: t.UsedKey, Cancelled: !t.CancelledAt.IsZero()}, true
}
