package tokenfmt

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Token is a parsed or freshly minted join token. Its Secret is the right to join:
// printing a Token with fmt or log/slog, or marshalling it to JSON, shows
// "<redacted>" in its place, and Encode is the only way to get the secret back out
// as text.
type Token struct {
	// Mesh is the id of the mesh the token joins.
	Mesh string
	// Brokers are where to connect: addresses, never names, so nothing needs name
	// resolution before the link exists.
	Brokers []netip.AddrPort
	// CAPin is the SHA-256 of the mesh CA certificate's SubjectPublicKeyInfo: the
	// only CA the joiner will accept a broker certificate from.
	CAPin [32]byte
	// SigningKey is the Ed25519 key whose declarations the joiner will believe.
	SigningKey ed25519.PublicKey
	// Node is the one machine the token is for, so a token read over a shoulder is
	// useless from any other.
	Node string
	// Role is what the mesh's record says the token admits.
	Role Role
	// Expiry is when the token stops working, in whole seconds, UTC.
	Expiry time.Time
	// Secret is the one-time right to join; the mesh keeps only SecretHash.
	Secret [SecretSize]byte
}

// Validate reports the first field, in token order, that Encode could not write or
// Parse would refuse, as a *FieldError. It does not look at the clock.
func (t Token) Validate() error {
	if err := ValidateMeshID(t.Mesh); err != nil {
		return err
	}
	if err := validateBrokers(t.Brokers); err != nil {
		return err
	}
	if t.CAPin == ([32]byte{}) {
		return &FieldError{Field: fieldCAPin, Reason: "the CA pin is all zeros: it was never set (use PinOf on the mesh CA certificate)"}
	}
	if len(t.SigningKey) != ed25519.PublicKeySize {
		return &FieldError{Field: fieldSigningKey, Reason: fmt.Sprintf("the signing key is %d bytes; an Ed25519 public key is %d", len(t.SigningKey), ed25519.PublicKeySize)}
	}
	if [32]byte(t.SigningKey) == ([32]byte{}) {
		return &FieldError{Field: fieldSigningKey, Reason: "the signing key is all zeros: it was never set"}
	}
	if err := ValidateNodeID(t.Node); err != nil {
		return err
	}
	if _, err := ParseRole(string(t.Role)); err != nil {
		return err
	}
	if sec := t.Expiry.Unix(); sec < 0 || sec > maxExpiryUnix || t.Expiry.Nanosecond() != 0 {
		return &FieldError{Field: fieldExpiry, Reason: "the expiry must be whole seconds between 1970 and the year 9999"}
	}
	if t.Secret == ([SecretSize]byte{}) {
		return &FieldError{Field: fieldSecret, Reason: "the secret is all zeros: it was never set"}
	}
	return nil
}

func validateBrokers(list []netip.AddrPort) error {
	bad := func(format string, args ...any) error {
		return &FieldError{Field: fieldBrokers, Reason: fmt.Sprintf(format, args...)}
	}
	if len(list) == 0 {
		return bad("there is no broker address")
	}
	if len(list) > MaxBrokers {
		return bad("there are %d broker addresses, more than %d", len(list), MaxBrokers)
	}
	for i, ap := range list {
		if reason := brokerProblem(ap); reason != "" {
			return bad("broker address %d %s", i+1, reason)
		}
		for j := range i {
			if list[j] == ap {
				return bad("broker address %d repeats address %d", i+1, j+1)
			}
		}
	}
	return nil
}

// Encode returns the token text, secret included, ready to hand to the person
// adopting a machine. It is the only way to get the secret out as text; treat the
// result as a credential and never log it. Encode does not validate: tokens from Mint
// and Parse are valid, and Parse refuses the text of any other invalid token.
func (t Token) Encode() string {
	body := t.body(hex.EncodeToString(t.Secret[:]))
	return body + "_" + checksum(body)
}

// body writes every field but the crc, with secret as the secret field.
func (t Token) body(secret string) string {
	var b strings.Builder
	b.Grow(256 + 48*len(t.Brokers))
	b.WriteString(Prefix)
	b.WriteString(strconv.Itoa(Version))
	b.WriteByte('_')
	b.WriteString(t.Mesh)
	b.WriteByte('_')
	for i, ap := range t.Brokers {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(ap.String())
	}
	b.WriteByte('_')
	b.WriteString(hex.EncodeToString(t.CAPin[:]))
	b.WriteByte('_')
	b.WriteString(hex.EncodeToString(t.SigningKey))
	b.WriteByte('_')
	b.WriteString(t.Node)
	b.WriteByte('_')
	b.WriteString(string(t.Role))
	b.WriteByte('_')
	b.WriteString(strconv.FormatInt(t.Expiry.Unix(), 10))
	b.WriteByte('_')
	b.WriteString(secret)
	return b.String()
}

// SecretHash returns SHA-256("mesh-token-secret-v1\x00" || Secret): what the mesh
// stores instead of the secret, so that a leaked mesh state yields no usable token.
// The host agent computes the same hash to refer to a token without keeping it.
func (t Token) SecretHash() [32]byte {
	h := sha256.New()
	h.Write([]byte("mesh-token-secret-v1\x00"))
	h.Write(t.Secret[:])
	var out [32]byte
	h.Sum(out[:0])
	return out
}
