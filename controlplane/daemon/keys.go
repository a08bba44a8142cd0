package daemon

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nkeys"

	"mesh/controlplane/api"
	"mesh/controlplane/datadir"
	"mesh/controlplane/seal"
	"mesh/controlplane/state"
	"mesh/declarations"
)

func curvePublic(kp nkeys.KeyPair) string {
	pub, _ := kp.PublicKey()
	return pub
}

// syncKeys makes the signing keys this node holds match the replicated keyring: a key
// added by a rotation is opened from its copy sealed to this node's curve key, a
// retired one is dropped from signing-key.pem. The signer then signs with every key of
// the keyring.
func (d *Daemon) syncKeys() error {
	d.keysMu.Lock()
	defer d.keysMu.Unlock()
	var (
		want   []string
		sealed state.SealedKey
		have   bool
	)
	d.fsm.Read(func(s *state.State) {
		want = slices.Clone(s.Keyring.Keys)
		sealed, have = s.SealedKeys[d.cfg.Node]
	})
	if len(want) == 0 {
		return nil // not initialised yet
	}
	held, err := d.opts.Dir.LoadSigningKeys()
	if err != nil {
		return err
	}
	keys, missing, err := keyringKeys(want, sealed, have, held, d.curve)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		d.log.Error("this control node lacks signing keys of the keyring; hosts that trust only those will not verify what it signs", "missing", missing)
	}
	if len(keys) != len(held) || !slices.EqualFunc(keys, held, func(a, b ed25519.PrivateKey) bool { return a.Equal(b) }) {
		if err := d.opts.Dir.SaveSigningKeys(keys); err != nil {
			return err
		}
		d.log.Info("signing keys updated to the keyring", "keys", len(keys))
	}
	d.signer.setKeys(keys)
	return nil
}

// rotateKey adds a new signing key: the keyring epoch+1 lists the old keys and the new
// one, signed by all of them; the new private key is sealed to each control node.
func (d *Daemon) rotateKey(req api.RotateRequest) (api.KeyringResult, error) {
	d.keyringMu.Lock()
	defer d.keyringMu.Unlock()
	return d.rotateHeld(req)
}

// rotateHeld is rotateKey under keyringMu.
func (d *Daemon) rotateHeld(api.RotateRequest) (api.KeyringResult, error) {
	var (
		cur      state.Keyring
		members  []state.ControlNode
		mesh     string
		reported uint64 // the highest epoch a node reports, within reach
	)
	d.fsm.Read(func(s *state.State) {
		cur, members, mesh = s.Keyring, s.ActiveControlNodes(), s.Mesh
		reported = reportedPast(s)
	})
	if len(cur.Keys) > 1 {
		// Most often the rotation named is the caller's own: a rotate run again, or
		// one whose answer was lost, or another operator's a moment before.
		return api.KeyringResult{}, &api.Error{Code: api.CodeBadRequest, Message: fmt.Sprintf(
			"a rotation is in progress: keyring epoch %d holds the old key and the new one (%s…); if that rotation is yours, it completed, and another would start only after it: "+
				"wait until meshctl signing-key status shows every host on epoch %d, then meshctl signing-key retire",
			cur.Epoch, cur.Keys[len(cur.Keys)-1][:min(12, len(cur.Keys[len(cur.Keys)-1]))], cur.Epoch)}
	}
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return api.KeyringResult{}, err
	}
	// Hosts that report an epoch past the state's accepted a keyring the state no
	// longer holds (a control plane restored from a copy older than a rotation),
	// and refuse another under that epoch as a replay: the rotation goes past it,
	// once every member applies the rules that allow it.
	epoch, rules := cur.Epoch+1, 0
	if reported > cur.Epoch {
		if rules = d.rulesFor(state.RulesRotatePastReported); rules != 0 {
			epoch = reported + 1
			d.log.Warn("hosts report a keyring epoch past the mesh's (a control plane restored from a copy older than a rotation): the rotation goes past it",
				"mesh_epoch", cur.Epoch, "reported_epoch", reported, "epoch", epoch)
		} else {
			d.log.Warn("hosts report a keyring epoch past the mesh's, and a control node on older rules runs: the rotation takes the next epoch, which those hosts refuse as a replay until the old key is retired",
				"mesh_epoch", cur.Epoch, "reported_epoch", reported, "older", d.notOnRules(state.RulesRotatePastReported))
		}
	}
	// Checked again as it commits: a control node admitted meanwhile has no copy.
	if r := d.rulesFor(state.RulesRotateSealedToAll); r != 0 {
		rules = max(rules, r)
	}
	next := declarations.Keyring{Mesh: mesh, Epoch: epoch, Keys: append(slices.Clone(cur.Keys), hex.EncodeToString(pub)), IssuedAt: d.now().UTC().Truncate(time.Second)}
	env, err := declarations.SignKeyring(next, append(d.signer.currentKeys(), key)...)
	if err != nil {
		return api.KeyringResult{}, err
	}
	keyPEM, err := datadir.EncodeSigningKey(key)
	if err != nil {
		return api.KeyringResult{}, err
	}
	sealed := map[string]state.SealedKey{}
	for _, m := range members {
		if m.CurveKey == "" {
			return api.KeyringResult{}, &api.Error{Code: api.CodeInternal, Message: "control node " + m.ID + " has no curve key: it could not receive the new key"}
		}
		blob, sender, err := seal.ToCurveKey(keyPEM, m.CurveKey)
		if err != nil {
			return api.KeyringResult{}, err
		}
		sealed[m.ID] = state.SealedKey{KeyID: hex.EncodeToString(pub), Blob: blob, Sealer: sender, To: m.CurveKey}
	}
	res, err := d.commit(state.Command{Op: state.OpRotate, Rules: rules, Rotate: &state.RotateCmd{
		Keyring: state.Keyring{Epoch: next.Epoch, Keys: next.Keys, Envelope: env}, Sealed: sealed,
	}})
	if err != nil {
		return api.KeyringResult{}, err
	}
	if res.Err != nil {
		return api.KeyringResult{}, refusal(res.Err)
	}
	if err := d.syncKeys(); err != nil {
		return api.KeyringResult{}, err
	}
	d.publishKeyring(env)
	d.metrics.keyringEpochs.Inc()
	d.log.Warn("signing key rotated: the keyring lists the old and the new key until the old one is retired", "epoch", next.Epoch)
	return api.KeyringResult{Epoch: next.Epoch, Keys: next.Keys}, nil
}

// reportedPast is the highest keyring epoch a node not revoked reports, counting
// only epochs within MaxKeyringHistory of the state's: a host's report is its own
// word, and one claiming an epoch far ahead would otherwise push every later
// epoch, towards the end of the counter.
func reportedPast(s *state.State) uint64 {
	top := s.Keyring.Epoch
	for _, n := range s.Nodes {
		if e := n.Applied.KeyringEpoch; !n.Revoked && e > top && e-s.Keyring.Epoch <= state.MaxKeyringHistory {
			top = e
		}
	}
	return top
}

// keyringStatus says which live nodes acknowledged which keyring epoch.
func (d *Daemon) keyringStatus(api.KeyringStatusRequest) (api.KeyringStatus, error) {
	now := d.now()
	var out api.KeyringStatus
	d.fsm.Read(func(s *state.State) {
		out.Epoch, out.Keys = s.Keyring.Epoch, s.Keyring.Keys
		oldest := s.OldestKeptKeyring()
		for _, n := range s.Nodes {
			if n.Revoked {
				continue
			}
			v := d.view(n, now, oldest)
			out.Nodes = append(out.Nodes, api.KeyringAck{Node: n.ID, State: v.State, Epoch: n.Applied.KeyringEpoch,
				Gone: state.PastKeyringHistory(n.Applied, oldest)})
		}
	})
	slices.SortFunc(out.Nodes, func(a, b api.KeyringAck) int { return strings.Compare(a.Node, b.Node) })
	return out, nil
}

// retireKey drops every key but the newest. It is refused while a live node has not
// acknowledged the current keyring, unless forced; forced, it names the nodes it
// strands (they follow the chain of keyrings when they accept it).
func (d *Daemon) retireKey(req api.RetireRequest) (api.KeyringResult, error) {
	st, _ := d.keyringStatus(api.KeyringStatusRequest{})
	if len(st.Keys) < 2 && st.Epoch > 1 {
		// Retired already (a retire run twice, or two at once): done, as a
		// revocation run twice is. Or a rotate that did not complete, which
		// meshctl must not report as a retirement: Unchanged says which.
		return api.KeyringResult{Epoch: st.Epoch, Keys: st.Keys, Unchanged: true}, nil
	}
	if len(st.Keys) < 2 {
		return api.KeyringResult{}, &api.Error{Code: api.CodeBadRequest, Message: "the keyring holds one key: there is nothing to retire (rotate first)"}
	}
	var lagging []string
	for _, n := range st.Nodes {
		// A node past the keyring history can never acknowledge: it refused
		// every retirement for good, unless forced (it is failing keyring_gone).
		if n.State == api.StateAlive && n.Epoch < st.Epoch && !n.Gone {
			lagging = append(lagging, fmt.Sprintf("%s (epoch %d)", n.Node, n.Epoch))
		}
	}
	if len(lagging) > 0 && !req.Force {
		return api.KeyringResult{}, &api.Error{Code: api.CodeBadRequest, Message: fmt.Sprintf(
			"%d live node(s) have not acknowledged keyring epoch %d: %s; wait for them, or --force to retire anyway and strand them",
			len(lagging), st.Epoch, strings.Join(lagging, ", "))}
	}
	var mesh string
	d.fsm.Read(func(s *state.State) { mesh = s.Mesh })
	// Tokens an earlier retirement made useless are not this one's news: each
	// retirement named them again as "refused from now on" (a docs walkthrough).
	staleBefore := d.staleTokens(d.now())
	keep := st.Keys[len(st.Keys)-1:]
	next := declarations.Keyring{Mesh: mesh, Epoch: st.Epoch + 1, Keys: keep, IssuedAt: d.now().UTC().Truncate(time.Second)}
	// Signed by every key it replaces, so a host still on an older keyring can
	// follow the chain.
	env, err := declarations.SignKeyring(next, d.signer.currentKeys()...)
	if err != nil {
		return api.KeyringResult{}, err
	}
	res, err := d.commit(state.Command{Op: state.OpRetire, Retire: &state.RetireCmd{Keyring: state.Keyring{Epoch: next.Epoch, Keys: next.Keys, Envelope: env}}})
	if err != nil {
		return api.KeyringResult{}, err
	}
	if res.Err != nil {
		return api.KeyringResult{}, refusal(res.Err)
	}
	if err := d.syncKeys(); err != nil {
		return api.KeyringResult{}, err
	}
	d.publishKeyring(env)
	d.metrics.keyringEpochs.Inc()
	var stale []string
	for id, node := range d.staleTokens(d.now()) {
		if _, before := staleBefore[id]; !before {
			stale = append(stale, node)
		}
	}
	slices.Sort(stale)
	stale = slices.Compact(stale)
	d.log.Warn("old signing key retired", "epoch", next.Epoch, "stranded", lagging, "stale_tokens", len(stale))
	return api.KeyringResult{Epoch: next.Epoch, Keys: next.Keys, Stranded: lagging, StaleTokens: stale}, nil
}

// publishKeyring sends a keyring to every node; nodes that miss it get the chain on
// their next sync.
func (d *Daemon) publishKeyring(env []byte) {
	var ids []string
	d.fsm.Read(func(s *state.State) {
		for id, n := range s.Nodes {
			if !n.Revoked {
				ids = append(ids, id)
			}
		}
	})
	for _, id := range ids {
		_ = d.conns.publisher.Publish(api.DeclarationSubject(id), env)
	}
	_ = d.conns.publisher.Flush()
	// Declarations re-signed by the new set of keys follow.
	d.publishDeclarations(ids)
}

// keyringKeys picks the signing keys of the keyring want (public keys, hex) from
// those held (signing-key.pem) and the one sealed to this node's curve key during a
// rotation (when have), in the keyring's order, and names the keys it lacks (their
// first 16 hex digits). Holding none of them is an error: the node could sign
// nothing hosts verify.
func keyringKeys(want []string, sealed state.SealedKey, have bool, held []ed25519.PrivateKey, curve nkeys.KeyPair) (keys []ed25519.PrivateKey, missing []string, err error) {
	byPub := map[string]ed25519.PrivateKey{}
	for _, k := range held {
		byPub[hex.EncodeToString(k.Public().(ed25519.PublicKey))] = k
	}
	for _, pub := range want {
		if k, ok := byPub[pub]; ok {
			keys = append(keys, k)
			continue
		}
		if have && sealed.KeyID == pub {
			pemData, err := seal.FromCurveKey(curve, sealed.Blob, sealed.Sealer)
			if err != nil {
				return nil, nil, fmt.Errorf("open the new signing key sealed to this node: %w", err)
			}
			k, err := datadir.ParseSigningKey(pemData)
			if err != nil {
				return nil, nil, err
			}
			if hex.EncodeToString(k.Public().(ed25519.PublicKey)) != pub {
				return nil, nil, fmt.Errorf("the signing key sealed to this node is not the keyring's key %s", pub[:16])
			}
			keys = append(keys, k)
			continue
		}
		missing = append(missing, pub[:16])
	}
	if len(keys) == 0 {
		return nil, missing, fmt.Errorf("this control node holds none of the keyring's signing keys (%s)", strings.Join(missing, ", "))
	}
	return keys, missing, nil
}

// staleTokens are the pending tokens that carry a retired key (token_stale_key),
// by id, each to its node.
func (d *Daemon) staleTokens(now time.Time) map[string]string {
	out := map[string]string{}
	d.fsm.Read(func(s *state.State) {
		for id, t := range s.Tokens {
			if s.ShownState(t, now) == state.TokenStale {
				out[id] = t.Node
			}
		}
	})
	return out
}
