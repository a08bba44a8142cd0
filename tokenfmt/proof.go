package tokenfmt

import (
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/sha256"
)

// The token's secret never leaves the enrolling machine (docs/decisions/0018). It
// derives an Ed25519 key, the proof key, whose public half the mesh stores when the
// token is minted; the client proves the secret by signing, with the proof key,
// the mesh, the node and the node key it registers. That proof is worth nothing to
// whoever reads it on the way (a relay holding a leaf of the mesh CA): it names a
// node key, and only the holder of that key can log in with it, by signing the
// broker's nonce bound to its own TLS session. A copy of the state holds the proof
// key's public half, which proves nothing. The host agent derives the same key on
// its side (host/token); the golden vectors hold the two together.

// proofKeyInfo is the HKDF info that derives the proof key's seed from the secret.
const proofKeyInfo = "mesh token proof key v1"

// proofPrefix separates a proof from anything else the proof key could sign.
const proofPrefix = "mesh token proof v1\x00"

// ProofKeySize is the length of the proof key's public half.
const ProofKeySize = ed25519.PublicKeySize

// proofPrivateKey derives the proof key from the secret.
func (t Token) proofPrivateKey() ed25519.PrivateKey {
	seed, err := hkdf.Key(sha256.New, t.Secret[:], nil, proofKeyInfo, ed25519.SeedSize)
	if err != nil {
		// hkdf.Key fails only for a length over 255 hash sizes.
		panic("tokenfmt: deriving the proof key: " + err.Error())
	}
	return ed25519.NewKeyFromSeed(seed)
}

// ProofKey returns the public half of the key the secret derives: what the mesh
// stores to check proofs.
func (t Token) ProofKey() ed25519.PublicKey {
	return t.proofPrivateKey().Public().(ed25519.PublicKey)
}

// Prove signs, with the proof key, that the holder of the secret registers key as
// node of mesh.
func (t Token) Prove(mesh, node, key string) []byte {
	return ed25519.Sign(t.proofPrivateKey(), ProofMessage(mesh, node, key))
}

// ProofMessage is what a proof signs.
func ProofMessage(mesh, node, key string) []byte {
	return []byte(proofPrefix + mesh + "\x00" + node + "\x00" + key)
}

// VerifyProof reports whether proof is the secret's (whose proof key is proofKey)
// for key as node of mesh.
func VerifyProof(proofKey []byte, mesh, node, key string, proof []byte) bool {
	return len(proofKey) == ProofKeySize && ed25519.Verify(proofKey, ProofMessage(mesh, node, key), proof)
}
