package daemon

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nkeys"

	"mesh/controlplane/api"
	"mesh/controlplane/seal"
	"mesh/controlplane/state"
)

// sealToControlNodes seals a control token's identity, as the minting meshctl sealed
// it under the token's secret, once more to the curve key of every active control
// node (state.Token explains why), and returns the copies by node id and the sum
// that tells the same request sent again. With no control node holding a curve key
// it refuses: the identity is never recorded as it came.
func (d *Daemon) sealToControlNodes(identity []byte) (map[string]state.SealedIdentity, string, error) {
	sum := sha256.Sum256(identity)
	var curves map[string]string
	d.fsm.Read(func(s *state.State) {
		curves = map[string]string{}
		for _, c := range s.ActiveControlNodes() {
			if c.CurveKey != "" {
				curves[c.ID] = c.CurveKey
			}
		}
	})
	if len(curves) == 0 {
		// Recorded as meshctl sealed it, the identity would open to whoever holds
		// a copy of the Raft log and the token's text, used or not (decision
		// 0004): refused. Every control node since before the first release
		// records a curve key; a state without one is damaged.
		return nil, "", &api.Error{Code: api.CodeInternal, Message: "no control node of the mesh records a curve key to seal the new control node's identity to: nothing was minted; the control plane's state lacks what every control node records when it is made: report it as a bug"}
	}
	out := make(map[string]state.SealedIdentity, len(curves))
	for id, curve := range curves {
		blob, sealer, err := seal.ToCurveKey(identity, curve)
		if err != nil {
			return nil, "", fmt.Errorf("seal the control token's identity to %s: %w", id, err)
		}
		out[id] = state.SealedIdentity{Blob: blob, Sealer: sealer}
	}
	return out, hex.EncodeToString(sum[:]), nil
}

// controlIdentity returns what a joiner presenting token tokenID is handed: the
// identity its token's secret opens, from this node's copy. A node takes copies of
// the pending tokens' identities as it joins (resealControlTokens); one that holds
// none for this token (admitted by a node that held none either, or joined while
// the token was being minted) refuses the joiner before anything is committed, and
// tells it to mint a new token. So does one whose identity is gone while it is
// pending by this node's clock (state.Token.IdentityLost): a command stamped by a
// control node whose clock was ahead found the token expired and dropped it.
func (d *Daemon) controlIdentity(tokenID, node string) ([]byte, *api.Error) {
	var (
		plain   []byte
		mine    state.SealedIdentity
		have    bool
		holders []string
		lost    *state.Token
	)
	d.fsm.Read(func(s *state.State) {
		t, ok := s.Tokens[tokenID]
		if !ok {
			return
		}
		if t.IdentityLost() {
			tc := *t
			lost = &tc
		}
		plain = t.Sealed
		mine, have = t.SealedTo[d.cfg.Node]
		for id := range t.SealedTo {
			holders = append(holders, id)
		}
	})
	switch {
	case have:
		identity, err := seal.FromCurveKey(d.curve, mine.Blob, mine.Sealer)
		if err != nil {
			// Sealed to an earlier machine joined under this node's id.
			return nil, &api.Error{Code: api.CodeUnavailable, Message: fmt.Sprintf("the token's identity is sealed to another curve key than %s's (the machine that held this id when it was minted): "+
				"cancel the token (meshctl token cancel %s) and mint a new control token", d.cfg.Node, node)}
		}
		return identity, nil
	case len(plain) > 0:
		return plain, nil
	case len(holders) > 0:
		slices.Sort(holders)
		return nil, &api.Error{Code: api.CodeUnavailable, Message: fmt.Sprintf("the token's identity is sealed to control nodes %s only; %s, which leads now, holds no copy of it: "+
			"cancel the token (meshctl token cancel %s) and mint a new control token", strings.Join(holders, ", "), d.cfg.Node, node)}
	}
	if lost != nil {
		// Not internal, which join's caller is told to run again with the same
		// token: nothing brings the identity back, and the token can admit no node.
		return nil, &api.Error{Code: api.CodeTokenExpired, Message: fmt.Sprintf("control token %s for %s expires at %s by this control node's clock, "+
			"but a command stamped by a control node whose clock was ahead found it expired and dropped its sealed identity, which nothing brings back: it admits no node. "+
			"Mint a new control token for %s where the CA key is (with --replace, which cancels this one), and check the control nodes' clocks (meshctl control status shows them; fix NTP where one is off)",
			lost.ShortID(), node, lost.Expiry.UTC().Format(time.RFC3339), node)}
	}
	return nil, &api.Error{Code: api.CodeInternal, Message: "the control token's sealed identity is missing from the state"}
}

// resealControlTokens seals again, to a joining control node's curve key, the
// identities of the other control tokens this node holds a copy of, for the
// admission's command to record beside the node (state.EnrolCmd.Reseal): a token
// minted before the node joined is then used while it leads as through any other.
// A key nothing can be sealed to refuses the admission before the token is used.
func (d *Daemon) resealControlTokens(except, curve string) (map[string]state.SealedIdentity, *api.Error) {
	if !nkeys.IsValidPublicCurveKey(curve) {
		return nil, &api.Error{Code: api.CodeBadRequest, Message: "a joining control node must present its public curve key (this meshctl is older than the control plane: upgrade it and run join again)"}
	}
	mine := map[string]state.SealedIdentity{}
	d.fsm.Read(func(s *state.State) {
		for id, t := range s.Tokens {
			if c, ok := t.SealedTo[d.cfg.Node]; ok && id != except && t.Role == state.RoleControl {
				mine[id] = c
			}
		}
	})
	out := make(map[string]state.SealedIdentity, len(mine))
	for id, c := range mine {
		identity, err := seal.FromCurveKey(d.curve, c.Blob, c.Sealer)
		if err != nil {
			continue // sealed to an earlier machine under this node's id: nothing to pass on
		}
		blob, sealer, err := seal.ToCurveKey(identity, curve)
		clear(identity)
		if err != nil {
			return nil, &api.Error{Code: api.CodeInternal, Message: "seal a pending control token's identity to the joining node: " + err.Error()}
		}
		out[id] = state.SealedIdentity{Blob: blob, Sealer: sealer}
	}
	return out, nil
}
