// Package token is the host agent's own reader of the join token, the one line a
// person pastes onto a new machine:
//
//	mesh1_<mesh>_<brokers>_<ca_pin>_<signing_key>_<node>_<role>_<expiry>_<secret>_<crc>
//
// The host imports nothing of the control plane, so this package defines the format a
// second time, independently of mesh/tokenfmt, using only the standard library. The
// two definitions are held together by tests on both sides that assert the field
// names and order and that parse the same golden vectors (testdata/golden.json, a
// byte-identical copy of tokenfmt's). docs/token-format.md describes the format.
//
// A parsed Token holds a credential. It prints redacted everywhere (fmt, log/slog,
// JSON); SecretHex is the one way to get the secret out, to present it to the mesh.
package token

import (
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"net/netip"
	"time"
)

const (
	// Prefix starts every token, followed by the decimal Version and '_'.
	Prefix = "mesh"
	// Version is the only token format version this agent reads.
	Version = 1
	// SecretSize is the length of the join secret in bytes.
	SecretSize = 32
	// MaxEncodedLen is the longest input Parse looks at; a real token is far shorter.
	MaxEncodedLen = 4096
	// MaxBrokers is the most broker addresses a token may list.
	MaxBrokers = 16
)

// Positions of the fields in the token, and in Fields().
const (
	iVersion = iota
	iMesh
	iBrokers
	iCAPin
	iSigningKey
	iNode
	iRole
	iExpiry
	iSecret
	iCRC
	nFields
)

// Fields returns the names of the token's fields in the order they appear. Each call
// returns a new slice.
func Fields() []string {
	return []string{"version", "mesh", "brokers", "ca_pin", "signing_key", "node", "role", "expiry", "secret", "crc"}
}

// fieldName is the name of the field at position i.
func fieldName(i int) string { return Fields()[i] }

// Role is what the token says the machine joins as. The mesh admits from its own
// record; the host uses the role only to say what it is doing.
type Role string

const (
	RoleWorker  Role = "worker"  // receives declarations, admits nobody
	RoleControl Role = "control" // becomes a control node
)

// Token is a parsed join token.
type Token struct {
	Mesh       string           // the mesh to join
	Brokers    []netip.AddrPort // where to dial, in the order to try; addresses, never names
	CAPin      [32]byte         // SHA-256 of the mesh CA's SubjectPublicKeyInfo: the only CA to trust
	SigningKey ed25519.PublicKey
	Node       string    // this machine's node id
	Role       Role      // the role the token was minted for
	Expiry     time.Time // whole seconds, UTC
	Secret     [SecretSize]byte
}

// SecretHash returns SHA-256("mesh-token-secret-v1\x00" || Secret), the same value
// the mesh stores, so the host can name a token in state or messages without keeping
// the secret.
func (t Token) SecretHash() [32]byte {
	msg := make([]byte, 0, 21+SecretSize)
	msg = append(msg, "mesh-token-secret-v1\x00"...)
	msg = append(msg, t.Secret[:]...)
	return sha256.Sum256(msg)
}

// SecretHex returns the secret as the 64 lowercase hex digits the enrolment request
// carries. It is the credential: send it only inside the pinned TLS connection and
// never log it.
func (t Token) SecretHex() string {
	const digits = "0123456789abcdef"
	out := make([]byte, 2*SecretSize)
	for i, b := range t.Secret {
		out[2*i] = digits[b>>4]
		out[2*i+1] = digits[b&0x0f]
	}
	return string(out)
}

// LooksLikeToken reports whether b starts as a token does, as Parse reads it (Trim,
// then the head checkHead checks: Prefix, a version's digits and "_"), of this
// version or another. It judges what is offered, not whether it parses: a file on
// stdin beside MESH_TOKEN is a second token when it starts as one, and the rest of a
// script (`bash < install.sh`, its next line `meshhost run …`) is not.
func LooksLikeToken(b []byte) bool {
	err := checkHead(Trim(string(b)))
	var ve *VersionError
	return err == nil || errors.As(err, &ve)
}
