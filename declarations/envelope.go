// Package declarations builds, signs and verifies the signed messages a
// control plane sends to a host: declarations (a node's whole desired state),
// keyrings (the signing keys a node trusts, for key rollover) and the
// revocation notice.
//
// Every message is a DSSE-style envelope: a payload type, the payload bytes
// and Ed25519 signatures over PAE(type, payload), or, for a declaration signed
// with others as one hash tree (SignBatch), over the tree's root, the envelope
// carrying its proof (Batch). A verifier checks the exact
// bytes it received before it parses the payload, and each way a message can
// be refused has its own error (see Code). The package imports only the
// standard library because the host agent uses it.
package declarations

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Payload types, limits and defaults.
const (
	PayloadTypeDeclaration = "application/vnd.mesh.declaration.v2+json"
	PayloadTypeKeyring     = "application/vnd.mesh.keyring.v1+json"
	PayloadTypeRevocation  = "application/vnd.mesh.revocation.v2+json"

	// MaxEnvelopeSize bounds an encoded envelope in bytes. It is checked
	// before any parsing.
	MaxEnvelopeSize = 1 << 20
	// MaxSignatures bounds the signatures on one envelope, which bounds the
	// work a hostile envelope can cause.
	MaxSignatures = 8
	// MaxPayloadTypeLen bounds the payloadType string.
	MaxPayloadTypeLen = 128

	// MaxFiles bounds the files of one body.
	MaxFiles = 1000
	// MaxPathLen bounds a file path in bytes.
	MaxPathLen = 1024
	// MaxPathElementLen bounds one element of a path (a file or directory name)
	// in bytes: the longest name Linux's file systems take (NAME_MAX). A body
	// with a longer one was signed and sent, and every host refused it at apply
	// and tried it again for ever (a walkthrough).
	MaxPathElementLen = 255
	// MaxFileSize bounds a file's content in bytes, after base64 decoding.
	MaxFileSize = 512 << 10

	// MaxKeyringKeys bounds the keys of one keyring.
	MaxKeyringKeys = 8

	// DefaultSkew is the clock tolerance applied after a declaration's expiry:
	// freshness is what expiry protects, so it stays tight.
	DefaultSkew = 5 * time.Minute
	// DefaultFutureSkew is how far in a node's future a declaration may have been
	// issued and still be accepted. An issue time carries no security weight of its
	// own (versions order declarations, expiry bounds their life), while a node
	// whose clock runs behind would otherwise refuse every fresh declaration; only a
	// grossly wrong clock is refused, with a message that says so.
	DefaultFutureSkew = time.Hour
	// DefaultValidity is how long after issuing a declaration should expire;
	// the control plane re-signs before that.
	DefaultValidity = 24 * time.Hour
)

// Envelope is the wire form of every signed message.
type Envelope struct {
	PayloadType string      `json:"payloadType"`
	Payload     []byte      `json:"payload"` // standard base64 in JSON, as encoding/json does
	Signatures  []Signature `json:"signatures"`
	// Batch, on a declaration signed with others as one tree, proves its payload
	// is a leaf of the tree whose root the signatures sign (see Batch).
	Batch *Batch `json:"batch,omitempty"`
}

// Signature is one Ed25519 signature over PAE(PayloadType, Payload), or over
// PAE(PayloadTypeBatch, root) for an envelope with a Batch proof. KeyID
// names the key (see KeyID) so a verifier tries only that key.
type Signature struct {
	KeyID string `json:"keyid"`
	Sig   []byte `json:"sig"`
}

// PAE is the DSSE pre-authentication encoding, the exact bytes that are
// signed:
//
//	"DSSEv1" SP LEN(type) SP type SP LEN(payload) SP payload
//
// with LEN as ASCII decimal. Binding the type into the signed bytes means a
// signature made for one kind of message cannot be moved onto another.
func PAE(payloadType string, payload []byte) []byte {
	return appendPAE(make([]byte, 0, 48+len(payloadType)+len(payload)), payloadType, payload) // 48: "DSSEv1", spaces, two lengths
}

// appendPAE appends PAE(payloadType, payload) to b.
func appendPAE(b []byte, payloadType string, payload []byte) []byte {
	b = append(b, "DSSEv1 "...)
	b = strconv.AppendInt(b, int64(len(payloadType)), 10)
	b = append(b, ' ')
	b = append(b, payloadType...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(len(payload)), 10)
	b = append(b, ' ')
	return append(b, payload...)
}

// KeyID names an Ed25519 public key: "ed25519:" followed by the hex of the
// first 8 bytes of SHA-256 of the key.
func KeyID(pub ed25519.PublicKey) string {
	h := sha256.Sum256(pub)
	return "ed25519:" + hex.EncodeToString(h[:8])
}

// SignEnvelope signs payload under payloadType with every key given and
// returns the encoded envelope (JSON), signatures sorted by key id. It needs
// at least one key and at most MaxSignatures, no key twice, and refuses to
// produce an envelope larger than MaxEnvelopeSize, which no host would accept.
func SignEnvelope(payloadType string, payload []byte, keys ...ed25519.PrivateKey) ([]byte, error) {
	if reason := checkPayloadType(payloadType); reason != "" {
		return nil, errors.New("declarations: cannot sign: " + reason)
	}
	if len(payload) == 0 {
		return nil, errors.New("declarations: cannot sign an empty payload")
	}
	s, err := NewSigner(keys...)
	if err != nil {
		return nil, err
	}
	return s.Envelope(payloadType, payload)
}

// OpenEnvelope verifies an encoded envelope and returns its payload. In
// order, it checks: the size cap (ErrTooLarge); the shape, strictly (unknown
// or repeated fields, 0 or more than MaxSignatures signatures, a signature
// that is not 64 bytes, non-canonical base64) and that the payload type is
// wantType (*MalformedError); then the signatures over PAE, or over the root
// a batch proof leads to, by the keys in trusted (ErrUntrusted unless at least
// one is valid).
//
// signedBy lists every trusted key that produced a valid signature, in the
// order of trusted: key rollover needs to know "signed by both". The payload
// is not parsed.
func OpenEnvelope(raw []byte, wantType string, trusted []ed25519.PublicKey) (payload []byte, signedBy []ed25519.PublicKey, err error) {
	if err := checkTrusted(trusted); err != nil {
		return nil, nil, err
	}
	env, err := parseEnvelope(raw)
	if err != nil {
		return nil, nil, err
	}
	return openParsed(env, wantType, trusted)
}

// Open is OpenEnvelope of the envelope p was parsed from.
func (p *Parsed) Open(wantType string, trusted []ed25519.PublicKey) (payload []byte, signedBy []ed25519.PublicKey, err error) {
	if err := checkTrusted(trusted); err != nil {
		return nil, nil, err
	}
	return openParsed(p.env, wantType, trusted)
}

// openParsed is OpenEnvelope after the size cap and the shape check.
func openParsed(env Envelope, wantType string, trusted []ed25519.PublicKey) (payload []byte, signedBy []ed25519.PublicKey, err error) {
	if err := checkType(env, wantType); err != nil {
		return nil, nil, err
	}
	signedBy = verifySignatures(env, trusted)
	if len(signedBy) == 0 {
		return nil, nil, untrusted(env, trusted)
	}
	return env.Payload, signedBy, nil
}

// Parsed is an envelope that passed the size cap and the strict shape check, and
// nothing more: no signature on it has been checked. Its payload type may route it
// to the right verifier; nothing else about it may be believed until one of its
// methods (VerifyDeclaration, VerifyKeyring, VerifyRevocation, VerifyMembership,
// Open) accepted it. Each of those is the package function of the same name without
// parsing the envelope again, so a receiver that routes by type parses it once.
type Parsed struct {
	env Envelope
}

// ParseEnvelope applies the size cap (ErrTooLarge) and the strict shape check
// (*MalformedError) to an encoded envelope, the first steps of every verifier.
func ParseEnvelope(raw []byte) (*Parsed, error) {
	env, err := parseEnvelope(raw)
	if err != nil {
		return nil, err
	}
	return &Parsed{env: env}, nil
}

// PayloadType is the envelope's payloadType, unverified: for routing only.
func (p *Parsed) PayloadType() string { return p.env.PayloadType }

// PeekType returns an envelope's payloadType after the size cap and the shape
// check, without verifying any signature. It is for routing a message to the
// right verifier; nothing else about the envelope may be believed from it. A
// receiver that goes on to verify the envelope uses ParseEnvelope instead, which
// parses it once for both.
func PeekType(raw []byte) (string, error) {
	p, err := ParseEnvelope(raw)
	if err != nil {
		return "", err
	}
	return p.PayloadType(), nil
}

// parseEnvelope applies the size cap and the strict shape check.
func parseEnvelope(raw []byte) (Envelope, error) {
	if len(raw) > MaxEnvelopeSize {
		return Envelope{}, fmt.Errorf("%w: %d bytes, over the limit of %d; it was not parsed", ErrTooLarge, len(raw), MaxEnvelopeSize)
	}
	var env Envelope
	if err := decodeStrict(raw, &env); err != nil {
		return Envelope{}, &MalformedError{What: "envelope", Reason: err.Error()}
	}
	bad := func(format string, args ...any) (Envelope, error) {
		return Envelope{}, &MalformedError{What: "envelope", Reason: fmt.Sprintf(format, args...)}
	}
	if reason := checkPayloadType(env.PayloadType); reason != "" {
		return bad("%s", reason)
	}
	if env.PayloadType == PayloadTypeBatch {
		// Its plain PAE is what a batch's signatures sign: a fan-out's root would
		// open here as a verified payload of that type. A root is only ever
		// verified under a batch proof, whose envelope names its leaf's type.
		return bad("its payloadType %s names a batch's root, which is signed only under a batch proof", PayloadTypeBatch)
	}
	if len(env.Payload) == 0 {
		return bad("the payload is empty")
	}
	switch n := len(env.Signatures); {
	case n == 0:
		return bad("it carries no signature")
	case n > MaxSignatures:
		return bad("it carries %d signatures, at most %d are allowed", n, MaxSignatures)
	}
	for i, s := range env.Signatures {
		if !validKeyID(s.KeyID) {
			return bad("signature %d: keyid %q is not of the form ed25519:<16 hex digits>", i, clip(s.KeyID, maxIDShown))
		}
		if len(s.Sig) != ed25519.SignatureSize {
			return bad("signature %d (%s) is %d bytes, an Ed25519 signature is %d", i, s.KeyID, len(s.Sig), ed25519.SignatureSize)
		}
		for _, o := range env.Signatures[:i] {
			if o.KeyID == s.KeyID {
				return bad("two signatures name key %s", s.KeyID)
			}
		}
	}
	if env.Batch != nil {
		if reason := checkBatch(env.Batch, env.PayloadType); reason != "" {
			return bad("%s", reason)
		}
	}
	return env, nil
}

func checkType(env Envelope, want string) error {
	if env.PayloadType != want {
		return &MalformedError{What: "envelope", Reason: fmt.Sprintf("payload type is %q, expected %q", env.PayloadType, want)}
	}
	return nil
}

// verifySignatures returns the keys of trusted that made a valid signature
// on env. Each signature is checked only against the trusted keys its keyid
// names, so a hostile envelope costs at most one verification per signature
// (two keys sharing a 64-bit id prefix among a handful is not a concern).
func verifySignatures(env Envelope, trusted []ed25519.PublicKey) []ed25519.PublicKey {
	if len(trusted) == 0 {
		return nil
	}
	ids := make([]string, len(trusted))
	for i, k := range trusted {
		ids[i] = KeyID(k)
	}
	valid := make([]bool, len(trusted))
	msg := env.signedMessage()
	for _, s := range env.Signatures {
		for i, id := range ids {
			if id == s.KeyID && !valid[i] && ed25519.Verify(trusted[i], msg, s.Sig) {
				valid[i] = true
			}
		}
	}
	var out []ed25519.PublicKey
	for i, ok := range valid {
		if ok && !slices.ContainsFunc(out, func(k ed25519.PublicKey) bool { return bytes.Equal(k, trusted[i]) }) {
			out = append(out, trusted[i])
		}
	}
	return out
}

// untrusted builds the ErrUntrusted error, naming the keys involved (key ids
// are public) so an operator can tell a stale keyring from a foreign mesh.
func untrusted(env Envelope, trusted []ed25519.PublicKey) error {
	signers := make([]string, len(env.Signatures))
	for i, s := range env.Signatures {
		signers[i] = s.KeyID
	}
	trustedIDs := make([]string, len(trusted))
	for i, k := range trusted {
		trustedIDs[i] = KeyID(k)
	}
	if len(trustedIDs) == 0 {
		trustedIDs = []string{"no key"}
	}
	return fmt.Errorf("%w: no valid signature by a trusted key (signed as %s; this node trusts %s); it is ignored",
		ErrUntrusted, strings.Join(signers, ", "), strings.Join(trustedIDs, ", "))
}

func checkTrusted(trusted []ed25519.PublicKey) error {
	for i, k := range trusted {
		if len(k) != ed25519.PublicKeySize {
			return fmt.Errorf("declarations: trusted key %d is %d bytes, want an Ed25519 public key of %d", i, len(k), ed25519.PublicKeySize)
		}
	}
	return nil
}

// checkPayloadType returns why t is not an acceptable payload type, or "".
// Printable ASCII without spaces keeps it safe to repeat in messages.
func checkPayloadType(t string) string {
	if t == "" {
		return "payloadType is empty"
	}
	if len(t) > MaxPayloadTypeLen {
		return fmt.Sprintf("payloadType is %d bytes, at most %d are allowed", len(t), MaxPayloadTypeLen)
	}
	for i := 0; i < len(t); i++ {
		if t[i] <= ' ' || t[i] > '~' {
			return fmt.Sprintf("payloadType %q holds a character other than printable ASCII", t)
		}
	}
	return ""
}

func validKeyID(s string) bool {
	h, ok := strings.CutPrefix(s, "ed25519:")
	if !ok || len(h) != 16 {
		return false
	}
	for i := 0; i < len(h); i++ {
		if !('0' <= h[i] && h[i] <= '9' || 'a' <= h[i] && h[i] <= 'f') {
			return false
		}
	}
	return true
}
