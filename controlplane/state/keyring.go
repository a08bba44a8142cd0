package state

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
)

// SealedKey is a signing private key sealed to one control node's curve key.
type SealedKey struct {
	KeyID  string `json:"key_id"` // hex public key it belongs to
	Blob   []byte `json:"blob"`
	Sealer string `json:"sealer"` // the sender's public curve key
	// To is the recipient's public curve key (RulesRotateSealedToAll): a copy for a
	// control node id is its machine's only if the keys match, since another
	// machine may have been admitted under the id since the rotation looked.
	To string `json:"to,omitempty"`
}

// RotateCmd adds a new signing key: the keyring it installs lists the old keys and the
// new one and is signed by all of them; the new private key travels sealed to each
// control node's curve key, never in clear.
type RotateCmd struct {
	Keyring Keyring              `json:"keyring"`
	Sealed  map[string]SealedKey `json:"sealed"` // control node id -> the new key, sealed to it
}

// RetireCmd installs a keyring without the retired keys.
type RetireCmd struct {
	Keyring Keyring `json:"keyring"`
}

// Operation names.
const (
	OpRotate = "rotate"
	OpRetire = "retire"
)

// Keyring errors.
var (
	ErrRotationPending = fmt.Errorf("%w: a rotation is in progress; retire the old key first", ErrBadCommand)
	ErrNothingToRetire = fmt.Errorf("%w: the keyring holds one key; rotate first", ErrBadCommand)
)

// KeyringChain returns the signed keyrings after epoch, oldest first: what a host that
// was away follows to the current keyring, each link signed by the keys it replaced.
func (s *State) KeyringChain(after uint64) []json.RawMessage {
	var out []json.RawMessage
	for _, e := range slices.Sorted(maps.Keys(s.Keyrings)) {
		if e > after && e < s.Keyring.Epoch {
			out = append(out, s.Keyrings[e])
		}
	}
	if s.Keyring.Epoch > after {
		out = append(out, s.Keyring.Envelope)
	}
	return out
}

func (s *State) applyRotate(c *RotateCmd, rules int) Result {
	next := c.Keyring
	if len(s.Keyring.Keys) > 1 {
		return Result{Err: ErrRotationPending}
	}
	past := next.Epoch > s.Keyring.Epoch && rules >= RulesRotatePastReported
	if next.Epoch != s.Keyring.Epoch+1 && !past || len(next.Keys) != len(s.Keyring.Keys)+1 || !slices.Equal(next.Keys[:len(s.Keyring.Keys)], s.Keyring.Keys) {
		return Result{Err: fmt.Errorf("%w: a rotation adds one key to keyring epoch %d, under the next epoch (or a later one, by rules %d)", ErrBadCommand, s.Keyring.Epoch, RulesRotatePastReported)}
	}
	if rules >= RulesRotateSealedToAll {
		for _, cn := range s.ActiveControlNodes() {
			if sk, ok := c.Sealed[cn.ID]; !ok || sk.To != cn.CurveKey {
				return Result{Err: fmt.Errorf("%w: control node %s has no copy of the new key (admitted after the rotation looked at the control nodes); nothing was changed: run the rotation again", ErrRotationMissesNode, cn.ID)}
			}
		}
	}
	s.archiveKeyring()
	s.Keyring = next
	s.SealedKeys = maps.Clone(c.Sealed)
	return Result{}
}

func (s *State) applyRetire(c *RetireCmd) Result {
	next := c.Keyring
	if len(s.Keyring.Keys) < 2 {
		return Result{Err: ErrNothingToRetire}
	}
	if next.Epoch != s.Keyring.Epoch+1 || len(next.Keys) == 0 {
		return Result{Err: fmt.Errorf("%w: a retirement installs keyring epoch %d with the keys kept", ErrBadCommand, s.Keyring.Epoch+1)}
	}
	for _, k := range next.Keys {
		if !slices.Contains(s.Keyring.Keys, k) {
			return Result{Err: fmt.Errorf("%w: a retirement cannot add a key", ErrBadCommand)}
		}
	}
	s.archiveKeyring()
	s.Keyring = next
	for id, sk := range s.SealedKeys {
		if !slices.Contains(next.Keys, sk.KeyID) {
			delete(s.SealedKeys, id)
		}
	}
	return Result{}
}

// MaxKeyringHistory bounds the earlier keyrings the state keeps for hosts that were
// away: a host more than this many epochs behind cannot follow the chain and must be
// enrolled again (a rotation and its retirement take two epochs: 32 rotations).
const MaxKeyringHistory = 64

// OldestKeptKeyring is the epoch of the oldest earlier keyring the state keeps for
// hosts that were away (0: none, no rotation yet).
func (s *State) OldestKeptKeyring() uint64 {
	if len(s.Keyrings) == 0 {
		return 0
	}
	return slices.Min(slices.Collect(maps.Keys(s.Keyrings)))
}

// PastKeyringHistory reports whether a node's report a shows that it cannot follow
// the chain of keyrings to the current one: it holds an epoch older than every
// keyring the state keeps (oldestKept, OldestKeptKeyring), so the chain it is sent
// starts past its own, and it refused what it was sent as signed by no key it
// trusts. Such a node refuses every keyring, declaration and revocation notice
// signed since and must be enrolled again. (Whether a host can take the oldest
// kept link depends on the keys its keyring shares with the link's signers, which
// the state no longer knows for a keyring it dropped: the host's refusal says.)
func PastKeyringHistory(a Applied, oldestKept uint64) bool {
	return a.KeyringEpoch != 0 && a.KeyringEpoch < oldestKept && a.ErrorCode == "untrusted"
}

func (s *State) archiveKeyring() {
	if s.Keyrings == nil {
		s.Keyrings = map[uint64]json.RawMessage{}
	}
	s.Keyrings[s.Keyring.Epoch] = s.Keyring.Envelope
	for len(s.Keyrings) > MaxKeyringHistory {
		delete(s.Keyrings, slices.Min(slices.Collect(maps.Keys(s.Keyrings))))
	}
}
