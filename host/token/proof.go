package token

import (
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/sha256"
)

// The secret never leaves this machine (docs/decisions/0018 of the mesh). It derives
// an Ed25519 key, the proof key, whose public half the mesh stored when it minted the
// token; enrolment proves the secret by signing, with the proof key, the mesh, the
// node and the node key it registers. Whoever reads that proof on the way gains
// nothing: only the holder of the node key can log in with it, by signing the
// broker's nonce bound to its own TLS session. The control plane derives the same
// key (tokenfmt); the golden vectors hold the two together.

const (
	proofKeyInfo = "mesh token proof key v1"
	proofPrefix  = "mesh token proof v1\x00"
)

func (t Token) proofPrivateKey() ed25519.PrivateKey {
	seed, err := hkdf.Key(sha256.New, t.Secret[:], nil, proofKeyInfo, ed25519.SeedSize)
	if err != nil {
		// hkdf.Key fails only for a length over 255 hash sizes.
		panic("token: deriving the proof key: " + err.Error())
	}
	return ed25519.NewKeyFromSeed(seed)
}

// ProofKey returns the public half of the key the secret derives, as the mesh
// stores it.
func (t Token) ProofKey() ed25519.PublicKey {
	return t.proofPrivateKey().Public().(ed25519.PublicKey)
}

// Prove signs, with the proof key, that this machine registers key as node of mesh.
func (t Token) Prove(mesh, node, key string) []byte {
	return ed25519.Sign(t.proofPrivateKey(), ProofMessage(mesh, node, key))
}

// ProofMessage is what a proof signs.
func ProofMessage(mesh, node, key string) []byte {
	return []byte(proofPrefix + mesh + "\x00" + node + "\x00" + key)
}
