// Package seal protects what a joining control node is handed.
//
// Its TLS identity and operator credentials are minted on the CA holder when the
// control token is minted, and kept in the replicated state sealed under a key derived
// from the token secret (HKDF-SHA256, AES-256-GCM, bound to the mesh and node ids): any
// control node can hand them over, and a leaked state opens nothing, because the state
// holds only the secret's hash.
//
// The declaration signing key is never in the state at all: the control node that
// admits the joiner seals it, at that moment, to a curve key the joiner generated
// (NaCl box through nkeys' curve keys).
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nkeys"
)

// ControlIdentity is what a control token seals for its node.
type ControlIdentity struct {
	CertPEM []byte `json:"cert_pem"`
	KeyPEM  []byte `json:"key_pem"`
	// Creds is a standard NATS .creds file for the node's operators.
	Creds []byte `json:"creds"`
}

// ErrOpen means a sealed blob could not be opened: a wrong secret, another node, or a
// tampered blob.
var ErrOpen = errors.New("the sealed control identity does not open with this token (wrong token, or tampered)")

const version = 1

func key(secret [32]byte, mesh, node string) ([]byte, error) {
	return hkdf.Key(sha256.New, secret[:], []byte("mesh-control-identity-v1"), mesh+"/"+node, 32)
}

func aead(secret [32]byte, mesh, node string) (cipher.AEAD, error) {
	k, err := key(secret, mesh, node)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(k)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// Identity seals id for the node of a control token.
func Identity(secret [32]byte, mesh, node string, id ControlIdentity) ([]byte, error) {
	plain, err := json.Marshal(id)
	if err != nil {
		return nil, err
	}
	g, err := aead(secret, mesh, node)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, g.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	out := append([]byte{version}, nonce...)
	return g.Seal(out, nonce, plain, []byte(mesh+"/"+node)), nil
}

// OpenIdentity opens what Identity sealed.
func OpenIdentity(secret [32]byte, mesh, node string, blob []byte) (ControlIdentity, error) {
	var id ControlIdentity
	g, err := aead(secret, mesh, node)
	if err != nil {
		return id, err
	}
	if len(blob) < 1+g.NonceSize()+g.Overhead() || blob[0] != version {
		return id, ErrOpen
	}
	nonce, sealed := blob[1:1+g.NonceSize()], blob[1+g.NonceSize():]
	plain, err := g.Open(nil, nonce, sealed, []byte(mesh+"/"+node))
	if err != nil {
		return id, ErrOpen
	}
	if err := json.Unmarshal(plain, &id); err != nil {
		return id, fmt.Errorf("%w: %v", ErrOpen, err)
	}
	if len(id.CertPEM) == 0 || len(id.KeyPEM) == 0 || len(id.Creds) == 0 {
		return id, fmt.Errorf("%w: incomplete identity", ErrOpen)
	}
	return id, nil
}

// ToCurveKey seals data to a recipient's public curve key with a fresh sender key, and
// returns the blob and the sender's public key the recipient needs to open it.
func ToCurveKey(data []byte, recipient string) (blob []byte, sender string, err error) {
	if !nkeys.IsValidPublicCurveKey(recipient) {
		return nil, "", errors.New("not a public curve key")
	}
	kp, err := nkeys.CreateCurveKeys()
	if err != nil {
		return nil, "", err
	}
	defer kp.Wipe()
	sender, _ = kp.PublicKey()
	blob, err = kp.Seal(data, recipient)
	return blob, sender, err
}

// FromCurveKey opens what ToCurveKey sealed to kp.
func FromCurveKey(kp nkeys.KeyPair, blob []byte, sender string) ([]byte, error) {
	data, err := kp.Open(blob, sender)
	if err != nil {
		return nil, fmt.Errorf("the sealed signing key does not open: %w", err)
	}
	return data, nil
}
