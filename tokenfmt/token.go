// Package tokenfmt is the control plane's side of the join token: the one line an
// operator pastes onto a new machine so that it can find the mesh, recognise it,
// believe its declarations and prove it was invited.
//
// The encoded form is
//
//	mesh1_<mesh>_<brokers>_<ca_pin>_<signing_key>_<node>_<role>_<expiry>_<secret>_<crc>
//
// and is described for operators and implementers in docs/token-format.md. The host
// agent parses the same text with its own code (package mesh/host/token), because the
// host imports nothing of the control plane; golden vectors in testdata/golden.json,
// parsed by both packages' tests, hold the two definitions together. A change to the
// format here is a change there too, and a new version number.
package tokenfmt

import (
	"crypto/sha256"
	"crypto/x509"
	"strconv"
	"time"
)

const (
	// Prefix starts every token, followed by the decimal Version and "_".
	Prefix = "mesh"
	// Version is the token format version this package mints and parses.
	Version = 1

	// MaxTTL caps a token's lifetime. Joining is an operator at a terminal; a token
	// that must outlive that session points at automation that needs fixing, and a
	// long-lived control token is a long-lived root credential for the whole mesh.
	MaxTTL = time.Hour
	// DefaultTTL is the lifetime meshctl gives a token when the operator names none.
	DefaultTTL = 15 * time.Minute

	// SecretSize is the size of the one-time secret in bytes (256 bits).
	SecretSize = 32
	// MaxEncodedLen bounds the input Parse reads. A real token is well under half of
	// it even with MaxBrokers IPv6 addresses, so anything longer was not pasted from
	// meshctl.
	MaxEncodedLen = 4096
	// MaxBrokers is the most broker addresses a token carries.
	MaxBrokers = 16
)

// Field names, in the order they appear in the token.
const (
	fieldVersion    = "version"
	fieldMesh       = "mesh"
	fieldBrokers    = "brokers"
	fieldCAPin      = "ca_pin"
	fieldSigningKey = "signing_key"
	fieldNode       = "node"
	fieldRole       = "role"
	fieldExpiry     = "expiry"
	fieldSecret     = "secret"
	fieldCRC        = "crc"

	numFields = 10
)

// Fields returns the token's field names in the order they appear in the encoded
// text. The slice is new on every call; the caller may keep or change it.
func Fields() []string {
	return []string{
		fieldVersion, fieldMesh, fieldBrokers, fieldCAPin, fieldSigningKey,
		fieldNode, fieldRole, fieldExpiry, fieldSecret, fieldCRC,
	}
}

// Role is what a token admits a machine as. The mesh admits from its own record of
// the token, never from what the joiner says; the role is in the text so that the
// person pasting it can see which kind of credential they hold.
type Role string

const (
	// RoleWorker receives declarations and admits nobody. It is the default
	// because it hands over the least.
	RoleWorker Role = "worker"
	// RoleControl becomes a control node: it receives a TLS identity and the
	// declaration signing key, and can admit others.
	RoleControl Role = "control"
)

// ParseRole returns the Role named by s, exactly "worker" or "control". Anything else
// is a *FieldError for the role field.
func ParseRole(s string) (Role, error) {
	switch Role(s) {
	case RoleWorker, RoleControl:
		return Role(s), nil
	}
	if s == "" {
		return "", &FieldError{Field: fieldRole, Reason: `the role is empty; it must be "worker" or "control"`}
	}
	return "", &FieldError{Field: fieldRole, Reason: `the role must be "worker" or "control" (lowercase)`}
}

// PinOf returns the pin a token carries for cert: the SHA-256 of the certificate's
// DER-encoded SubjectPublicKeyInfo, untruncated. Pinning the key rather than the
// whole certificate lets the CA certificate be re-issued with the same key. A nil
// cert gives the zero pin, which Mint refuses.
func PinOf(cert *x509.Certificate) [32]byte {
	if cert == nil {
		return [32]byte{}
	}
	return sha256.Sum256(cert.RawSubjectPublicKeyInfo)
}

// ValidateMeshID reports whether s can be a mesh id: 1 to 63 characters of a-z, 0-9
// and '-', starting and ending with a letter or digit, so that it is safe inside NATS
// subjects, inside the token and in file names. The error is a *FieldError.
func ValidateMeshID(s string) error {
	if reason := idProblem(s); reason != "" {
		return &FieldError{Field: fieldMesh, Reason: "the mesh id " + reason}
	}
	return nil
}

// ValidateNodeID reports whether s can be a node id, with the same rules as
// ValidateMeshID. The error is a *FieldError.
func ValidateNodeID(s string) error {
	if reason := idProblem(s); reason != "" {
		return &FieldError{Field: fieldNode, Reason: "the node id " + reason}
	}
	return nil
}

// CheckNodeID is ValidateNodeID for a node id that is not read from a token (a
// command line's, a request's): its error, an *IDError, speaks of the node id
// alone, where ValidateNodeID's names the token field.
func CheckNodeID(s string) error {
	if reason := idProblem(s); reason != "" {
		return &IDError{Reason: "the node id " + reason}
	}
	return nil
}

// idProblem describes what is wrong with an id, or returns "". It never quotes the
// id: the text may come from a mangled token, and errors must not echo token text.
func idProblem(s string) string {
	const rule = "; ids are 1 to 63 characters of a-z, 0-9 and '-', starting and ending with a letter or digit"
	switch {
	case s == "":
		return "is empty" + rule
	case len(s) > 63:
		return "is longer than 63 characters" + rule
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return "has a character other than a-z, 0-9 or '-' at position " + strconv.Itoa(i+1) + rule
		}
	}
	if s[0] == '-' || s[len(s)-1] == '-' {
		return "starts or ends with '-'" + rule
	}
	return ""
}
