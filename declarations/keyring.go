package declarations

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Keyring is the set of declaration signing keys a mesh's nodes trust, at an
// epoch that only grows. A host starts from the single key in its token,
// Keyring{Epoch: 0, Keys: [that key]}; the mesh's first real keyring has
// epoch 1.
type Keyring struct {
	Mesh  string `json:"mesh"`
	Epoch uint64 `json:"epoch"`
	// Keys are Ed25519 public keys in lowercase hex: 1 to MaxKeyringKeys,
	// no duplicates.
	Keys     []string  `json:"keys"`
	IssuedAt time.Time `json:"issued_at"`
}

// PublicKeys decodes and checks the keyring's keys.
func (k Keyring) PublicKeys() ([]ed25519.PublicKey, error) {
	keys, reason := k.publicKeys()
	if reason != "" {
		return nil, errors.New("declarations: keyring: " + reason)
	}
	return keys, nil
}

func (k Keyring) publicKeys() ([]ed25519.PublicKey, string) {
	switch n := len(k.Keys); {
	case n == 0:
		return nil, "it lists no key"
	case n > MaxKeyringKeys:
		return nil, fmt.Sprintf("it lists %d keys, at most %d are allowed", n, MaxKeyringKeys)
	}
	out := make([]ed25519.PublicKey, 0, len(k.Keys))
	for i, s := range k.Keys {
		b, err := hex.DecodeString(s)
		if err != nil || len(b) != ed25519.PublicKeySize || hex.EncodeToString(b) != s {
			return nil, fmt.Sprintf("key %d is not an Ed25519 public key in lowercase hex (%d hex digits)", i, 2*ed25519.PublicKeySize)
		}
		if slices.ContainsFunc(out, func(o ed25519.PublicKey) bool { return bytes.Equal(o, b) }) {
			return nil, fmt.Sprintf("key %d (%s) is listed twice", i, KeyID(b))
		}
		out = append(out, b)
	}
	return out, ""
}

// SignKeyring checks k (mesh id, keys, issued_at) and returns it signed as an
// envelope of type PayloadTypeKeyring. To be accepted by hosts that trust
// the previous keyring, it must be signed by at least one key of that
// keyring and by every key it adds.
func SignKeyring(k Keyring, keys ...ed25519.PrivateKey) ([]byte, error) {
	if r := checkID("mesh", k.Mesh); r != "" {
		return nil, errors.New("declarations: cannot sign keyring: " + r)
	}
	if _, r := k.publicKeys(); r != "" {
		return nil, errors.New("declarations: cannot sign keyring: " + r)
	}
	if k.IssuedAt.IsZero() {
		return nil, errors.New("declarations: cannot sign keyring: issued_at is not set")
	}
	k.IssuedAt = k.IssuedAt.UTC()
	payload, err := json.Marshal(k)
	if err != nil {
		return nil, fmt.Errorf("declarations: encoding keyring: %w", err)
	}
	return SignEnvelope(PayloadTypeKeyring, payload, keys...)
}

// VerifyKeyring checks a keyring envelope against the keyring the node
// currently trusts and returns the keyring to trust from now on. In order:
// size cap and shape (ErrTooLarge, *MalformedError); a valid signature by a
// key of current (ErrUntrusted); the payload (*MalformedError, Signed); mesh
// equal to mesh (*AudienceError); the epoch: lower than current's is
// *VersionError (ErrRolledBack), equal with the same keys is accepted
// unchanged, equal with other keys is ErrReplayed; and last, proof of
// possession: every key the new keyring adds must have signed it
// (ErrUnprovenKey).
//
// current may have an empty Mesh (the keyring built from a token); a current
// keyring that is unusable is the caller's error, Code "error".
func VerifyKeyring(raw []byte, current Keyring, mesh string) (Keyring, error) {
	curKeys, err := checkKeyringArgs(current, mesh)
	if err != nil {
		return Keyring{}, err
	}
	env, err := parseEnvelope(raw)
	if err != nil {
		return Keyring{}, err
	}
	return verifyKeyring(env, current, curKeys, mesh)
}

// VerifyKeyring is VerifyKeyring of the envelope p was parsed from.
func (p *Parsed) VerifyKeyring(current Keyring, mesh string) (Keyring, error) {
	curKeys, err := checkKeyringArgs(current, mesh)
	if err != nil {
		return Keyring{}, err
	}
	return verifyKeyring(p.env, current, curKeys, mesh)
}

// checkKeyringArgs refuses the caller's mistakes and returns the current keys.
func checkKeyringArgs(current Keyring, mesh string) ([]ed25519.PublicKey, error) {
	if r := checkID("mesh", mesh); r != "" {
		return nil, errors.New("declarations: VerifyKeyring: " + r)
	}
	if current.Mesh != "" && current.Mesh != mesh {
		return nil, fmt.Errorf("declarations: VerifyKeyring: the current keyring is for mesh %q, not %q", current.Mesh, mesh)
	}
	curKeys, r := current.publicKeys()
	if r != "" {
		return nil, errors.New("declarations: VerifyKeyring: the current keyring is unusable: " + r)
	}
	return curKeys, nil
}

// verifyKeyring is VerifyKeyring after the arguments and the envelope's shape.
func verifyKeyring(env Envelope, current Keyring, curKeys []ed25519.PublicKey, mesh string) (Keyring, error) {
	if err := checkType(env, PayloadTypeKeyring); err != nil {
		return Keyring{}, err
	}
	if len(verifySignatures(env, curKeys)) == 0 {
		return Keyring{}, untrusted(env, curKeys)
	}

	var next Keyring
	if err := decodeStrict(env.Payload, &next); err != nil {
		return Keyring{}, &MalformedError{What: "keyring", Signed: true, Reason: err.Error()}
	}
	nextKeys, r := next.publicKeys()
	if r != "" {
		return Keyring{}, &MalformedError{What: "keyring", Signed: true, Reason: r}
	}
	if next.IssuedAt.IsZero() {
		return Keyring{}, &MalformedError{What: "keyring", Signed: true, Reason: "issued_at is not set"}
	}

	if next.Mesh != mesh {
		return Keyring{}, &AudienceError{WantMesh: mesh, GotMesh: next.Mesh}
	}

	switch {
	case next.Epoch < current.Epoch:
		return Keyring{}, &VersionError{What: "keyring epoch", Got: next.Epoch, Current: current.Epoch}
	case next.Epoch == current.Epoch:
		if sameKeys(nextKeys, curKeys) {
			return next, nil
		}
		return Keyring{}, fmt.Errorf("%w: keyring epoch %d is already trusted with other keys; a keyring under a used epoch is refused", ErrReplayed, next.Epoch)
	}

	var added []ed25519.PublicKey
	for _, k := range nextKeys {
		if !containsKey(curKeys, k) {
			added = append(added, k)
		}
	}
	if len(added) > 0 {
		signed := verifySignatures(env, added)
		var missing []string
		for _, k := range added {
			if !containsKey(signed, k) {
				missing = append(missing, KeyID(k))
			}
		}
		if len(missing) > 0 {
			return Keyring{}, fmt.Errorf("%w: keyring epoch %d adds %s without a signature by it; the control plane must sign a new keyring with every key it adds",
				ErrUnprovenKey, next.Epoch, strings.Join(missing, ", "))
		}
	}
	return next, nil
}

func containsKey(keys []ed25519.PublicKey, k ed25519.PublicKey) bool {
	return slices.ContainsFunc(keys, func(o ed25519.PublicKey) bool { return bytes.Equal(o, k) })
}

func sameKeys(a, b []ed25519.PublicKey) bool {
	if len(a) != len(b) {
		return false
	}
	for _, k := range a {
		if !containsKey(b, k) {
			return false
		}
	}
	return true
}

// Revocation tells a node that the mesh revoked it. The host stops for good:
// it no longer reconnects or applies declarations.
type Revocation struct {
	Mesh string `json:"mesh"`
	Node string `json:"node"`
	// NodeKey binds the notice to one enrolment of the node id: a notice that
	// revoked an earlier enrolment does not stop the node enrolled since.
	NodeKey   string    `json:"node_key"`
	RevokedAt time.Time `json:"revoked_at"`
}

// SignRevocation checks r (mesh and node ids, revoked_at) and returns it
// signed as an envelope of type PayloadTypeRevocation.
func SignRevocation(r Revocation, keys ...ed25519.PrivateKey) ([]byte, error) {
	if reason := checkID("mesh", r.Mesh); reason != "" {
		return nil, errors.New("declarations: cannot sign revocation: " + reason)
	}
	if reason := checkID("node", r.Node); reason != "" {
		return nil, errors.New("declarations: cannot sign revocation: " + reason)
	}
	if reason := checkNodeKey(r.NodeKey); reason != "" {
		return nil, errors.New("declarations: cannot sign revocation: " + reason)
	}
	if r.RevokedAt.IsZero() {
		return nil, errors.New("declarations: cannot sign revocation: revoked_at is not set")
	}
	r.RevokedAt = r.RevokedAt.UTC()
	payload, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("declarations: encoding revocation: %w", err)
	}
	return SignEnvelope(PayloadTypeRevocation, payload, keys...)
}

// VerifyRevocation checks a revocation envelope: size cap and shape, a valid
// signature by a key in trusted, the payload, and that it names this mesh and
// node under this node's key (the same errors as VerifyDeclaration's first five
// steps). A revocation does not expire.
func VerifyRevocation(raw []byte, trusted []ed25519.PublicKey, mesh, node, nodeKey string) (Revocation, error) {
	if err := checkRevocationArgs(trusted, mesh, node, nodeKey); err != nil {
		return Revocation{}, err
	}
	env, err := parseEnvelope(raw)
	if err != nil {
		return Revocation{}, err
	}
	return verifyRevocation(env, trusted, mesh, node, nodeKey)
}

// VerifyRevocation is VerifyRevocation of the envelope p was parsed from.
func (p *Parsed) VerifyRevocation(trusted []ed25519.PublicKey, mesh, node, nodeKey string) (Revocation, error) {
	if err := checkRevocationArgs(trusted, mesh, node, nodeKey); err != nil {
		return Revocation{}, err
	}
	return verifyRevocation(p.env, trusted, mesh, node, nodeKey)
}

func checkRevocationArgs(trusted []ed25519.PublicKey, mesh, node, nodeKey string) error {
	if mesh == "" || node == "" || nodeKey == "" {
		return errors.New("declarations: VerifyRevocation needs the node's mesh, node id and node key")
	}
	return checkTrusted(trusted)
}

func verifyRevocation(env Envelope, trusted []ed25519.PublicKey, mesh, node, nodeKey string) (Revocation, error) {
	payload, _, err := openParsed(env, PayloadTypeRevocation, trusted)
	if err != nil {
		return Revocation{}, err
	}
	var r Revocation
	if err := decodeStrict(payload, &r); err != nil {
		return Revocation{}, &MalformedError{What: "revocation", Signed: true, Reason: err.Error()}
	}
	if r.RevokedAt.IsZero() {
		return Revocation{}, &MalformedError{What: "revocation", Signed: true, Reason: "revoked_at is not set"}
	}
	if r.Mesh != mesh || r.Node != node || r.NodeKey != nodeKey {
		return Revocation{}, &AudienceError{WantMesh: mesh, WantNode: node, WantKey: nodeKey, GotMesh: r.Mesh, GotNode: r.Node, GotKey: r.NodeKey}
	}
	return r, nil
}
