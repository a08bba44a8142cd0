package state

import (
	"slices"
	"time"
)

// RevokedRetention is how long a revoked node's record stays in the state after its
// revocation before the leader proposes to forget it (ForgetCmd): long enough for
// `meshctl nodes` to show the revocation for weeks and for a revocation run again to
// be answered with its record; short enough that a fleet of machines enrolled once
// and revoked when they go away (autoscaled instances, CI runners) does not grow the
// state, its snapshots and every backup by a whole record each for ever.
const RevokedRetention = 30 * 24 * time.Hour

// ForgetBatch is the most nodes one ForgetCmd names: a fleet revoked in a day is
// forgotten in a few entries of bounded size, each applied in milliseconds.
const ForgetBatch = 1000

// ForgetCmd replaces the records of revoked nodes by what the state must keep of
// them for good (ForgottenNode). Stamped with RulesForgetRevoked: older rules know no
// such command and would keep the records.
type ForgetCmd struct {
	// Nodes are the nodes to forget, each forgotten only if it is revoked and was
	// revoked before RevokedBefore: one enrolled again, or revoked again, between
	// the leader's look and the commit is left as it is.
	Nodes         []string  `json:"nodes"`
	RevokedBefore time.Time `json:"revoked_before"`
}

// OpForget names ForgetCmd.
const OpForget = "forget_revoked"

// ForgottenNode is what the state keeps of a revoked node once its record is
// forgotten (State.Forgotten). Its keys stay in RevokedKeys, refused and told
// they were revoked.
type ForgottenNode struct {
	// Version is the last version declared to the id: a machine enrolled under it
	// again continues after it, as it does after a record kept (applyEnrol).
	Version uint64 `json:"version"`
	// RevokedAt is when its last machine was revoked.
	RevokedAt time.Time `json:"revoked_at"`
	// Key is its last machine's key unless that is the one key the id was revoked
	// under (RevokedKeys), the fleet's common case, which then costs nothing more.
	Key string `json:"key,omitempty"`
}

// ForgottenKey is the key a forgotten id's last machine held: its Key, or the one
// key the id was revoked under; "" if the id is not forgotten or the state cannot
// tell (a damaged state).
func (s *State) ForgottenKey(id string) string {
	f, ok := s.Forgotten[id]
	switch {
	case !ok:
		return ""
	case f.Key != "":
		return f.Key
	}
	if keys := s.revokedOf[id]; len(keys) == 1 {
		return keys[0]
	}
	return ""
}

// RevokedDue returns, sorted, at most limit revoked nodes revoked before before: those
// a ForgetCmd may forget.
func (s *State) RevokedDue(before time.Time, limit int) []string {
	var out []string
	for id, n := range s.Nodes {
		if n.Revoked && n.RevokedAt.Before(before) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out[:min(len(out), limit)]
}

// AnyRevokedBefore reports whether a node revoked before before is kept: it stops at
// the first.
func (s *State) AnyRevokedBefore(before time.Time) bool {
	for _, n := range s.Nodes {
		if n.Revoked && n.RevokedAt.Before(before) {
			return true
		}
	}
	return false
}

func (s *State) applyForget(c *ForgetCmd) Result {
	var res Result
	dropped := map[string]bool{}
	for _, id := range c.Nodes {
		n, ok := s.Nodes[id]
		if !ok || !n.Revoked || !n.RevokedAt.Before(c.RevokedBefore) {
			continue
		}
		if s.Forgotten == nil {
			s.Forgotten = map[string]ForgottenNode{}
		}
		f := ForgottenNode{Version: n.Declared.Version, RevokedAt: n.RevokedAt}
		if keys := s.revokedOf[id]; len(keys) != 1 || keys[0] != n.PublicKey {
			// Not told by the id's one revoked key: revoked under several, or
			// (a state written before a key was refused for a second node) its
			// key listed under another id.
			f.Key = n.PublicKey
		}
		s.Forgotten[id] = f
		res.Forgotten = append(res.Forgotten, id)
		delete(s.Nodes, id)
		if s.byKey[n.PublicKey] == id {
			delete(s.byKey, n.PublicKey)
			dropped[n.PublicKey] = true
		}
	}
	if len(dropped) > 0 {
		// A key two records held (a state written before keys were refused for a
		// second node) goes to the other holder, as a restore would index it; one
		// pass over the nodes for the whole batch.
		for _, n := range s.Nodes {
			if dropped[n.PublicKey] {
				s.indexHolder(n)
			}
		}
	}
	s.collectBodies()
	return res
}

// forgottenView is the record a revocation answers with for a forgotten node: revoked
// at its time, under its last key.
func (s *State) forgottenView(id string, f ForgottenNode) *Node {
	return &Node{ID: id, Role: RoleWorker, PublicKey: s.ForgottenKey(id), Revoked: true, RevokedAt: f.RevokedAt, Declared: Declared{Version: f.Version}}
}
