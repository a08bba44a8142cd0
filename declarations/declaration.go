package declarations

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"
)

// Declaration is the signed payload that tells one node its whole desired
// state. It is not a delta: applying it replaces whatever an earlier
// declaration asked for.
type Declaration struct {
	Mesh string `json:"mesh"`
	Node string `json:"node"` // the audience: the one node this is for
	// NodeKey is the node's public key (an nkey) from its enrolment: a node id
	// enrolled again gets a new key, so nothing signed for the earlier
	// enrolment verifies for the new one.
	NodeKey string `json:"node_key"`
	// Version is assigned by the control plane, monotonic per node; 0 is the
	// empty declaration given at enrolment.
	Version uint64 `json:"version"`
	// KeyringEpoch is the epoch of the keyring the control plane held when
	// it signed; the host reports it, it is not checked here.
	KeyringEpoch uint64    `json:"keyring_epoch"`
	IssuedAt     time.Time `json:"issued_at"`
	ExpiresAt    time.Time `json:"expires_at"`
	Body         Body      `json:"body"`
}

// SignDeclaration checks d (mesh and node ids, expires_at after issued_at,
// the body rules) and returns it signed as an envelope of type
// PayloadTypeDeclaration. Times are encoded in UTC.
func SignDeclaration(d Declaration, keys ...ed25519.PrivateKey) ([]byte, error) {
	if err := d.checkHeader(); err != nil {
		return nil, err
	}
	body, err := EncodeBody(d.Body)
	if err != nil {
		return nil, err
	}
	s, err := NewSigner(keys...)
	if err != nil {
		return nil, err
	}
	d.Body = Body{}
	return s.Declaration(d, body)
}

// checkHeader checks what SignDeclaration checks of d besides the body.
func (d Declaration) checkHeader() error {
	if r := checkID("mesh", d.Mesh); r != "" {
		return errors.New("declarations: cannot sign declaration: " + r)
	}
	if r := checkID("node", d.Node); r != "" {
		return errors.New("declarations: cannot sign declaration: " + r)
	}
	if r := checkNodeKey(d.NodeKey); r != "" {
		return errors.New("declarations: cannot sign declaration: " + r)
	}
	if d.IssuedAt.IsZero() {
		return errors.New("declarations: cannot sign declaration: issued_at is not set")
	}
	if !d.ExpiresAt.After(d.IssuedAt) {
		return errors.New("declarations: cannot sign declaration: expires_at is not after issued_at")
	}
	return nil
}

// Expect is what a host knows before it looks at a declaration: who it is,
// what it last applied, and the time.
type Expect struct {
	Mesh, Node string
	// NodeKey is the public key this node enrolled with; it must be set.
	NodeKey string
	// KeyringEpoch is the epoch of the keyring this node has accepted: a
	// declaration signed under an older one is refused (ErrOldKeyring).
	KeyringEpoch uint64
	// HaveApplied is false before the first declaration was applied: any
	// version is then acceptable.
	HaveApplied       bool
	AppliedVersion    uint64
	AppliedBodyDigest [32]byte
	// Now is this node's clock; it must be set.
	Now time.Time
	// Skew is the clock tolerance after expiry; 0 means DefaultSkew.
	Skew time.Duration
	// FutureSkew is how far in this node's future the issue time may be; 0 means
	// DefaultFutureSkew.
	FutureSkew time.Duration
	// AppliedAnyIssueTime lets a copy of the applied declaration (SameAsApplied:
	// the applied version with the applied body digest) through whatever its issue
	// time, for a host putting back files it already applied under a clock more
	// than FutureSkew behind (decision 0006: an issue time in the host's future
	// carries no security weight, and this copy applies nothing new). Every other
	// declaration is still refused *NotYetValidError; expiry is checked as ever.
	AppliedAnyIssueTime bool
}

// Verified is a declaration that passed every check.
type Verified struct {
	Declaration
	BodyDigest [32]byte
	// SignedBy lists the key ids of the trusted keys that signed it.
	SignedBy []string
	// SameAsApplied is true when the version equals the applied one and the
	// body is identical: a re-signed refresh, with nothing to apply.
	SameAsApplied bool
	// IssuedAhead is true when only Expect.AppliedAnyIssueTime let it through:
	// its issue time is further in this node's future than the tolerance, and
	// any other declaration is refused ErrNotYetValid (this node's clock behind).
	IssuedAhead bool
}

// VerifyDeclaration checks a declaration envelope in this order, stopping at
// the first failure, each with its own error:
//
//  1. size cap: ErrTooLarge, before any parsing;
//  2. envelope shape and payload type: *MalformedError;
//  3. a valid signature by a key in trusted: ErrUntrusted;
//  4. the payload, strictly (unknown fields refused): *MalformedError with
//     Signed set;
//  5. audience, mesh, node and node key equal to exp's: *AudienceError
//     (ErrWrongMesh, ErrWrongAudience, ErrWrongEnrolment);
//  6. keyring epoch not older than exp.KeyringEpoch: *OldKeyringError;
//  7. version, if exp.HaveApplied: older than applied is *VersionError
//     (ErrRolledBack); equal with another body is *ReplayedError (ErrReplayed); equal with the
//     same body is accepted with SameAsApplied;
//  8. validity window, widened by FutureSkew before and Skew after: *NotYetValidError
//     (ErrNotYetValid) or *ExpiredError; a copy of the applied declaration has no
//     start with exp.AppliedAnyIssueTime (Verified.IssuedAhead says it had one);
//  9. the body rules: *BodyError.
//
// Mistakes by the caller (no mesh, node or node key in exp, a zero Now, a trusted key
// of the wrong length) are plain errors, Code "error".
func VerifyDeclaration(raw []byte, trusted []ed25519.PublicKey, exp Expect) (Verified, error) {
	if err := exp.check(trusted); err != nil {
		return Verified{}, err
	}
	env, err := parseEnvelope(raw) // 1, 2
	if err != nil {
		return Verified{}, err
	}
	return verifyDeclaration(env, trusted, exp)
}

// VerifyDeclaration is VerifyDeclaration of the envelope p was parsed from: steps
// 1 and 2 of the size cap and the shape passed in ParseEnvelope, and the rest
// follow.
func (p *Parsed) VerifyDeclaration(trusted []ed25519.PublicKey, exp Expect) (Verified, error) {
	if err := exp.check(trusted); err != nil {
		return Verified{}, err
	}
	return verifyDeclaration(p.env, trusted, exp)
}

// check refuses the caller's mistakes.
func (exp Expect) check(trusted []ed25519.PublicKey) error {
	if exp.Mesh == "" || exp.Node == "" || exp.NodeKey == "" {
		return errors.New("declarations: VerifyDeclaration needs the node's mesh, node id and node key")
	}
	if exp.Now.IsZero() {
		return errors.New("declarations: VerifyDeclaration needs the current time")
	}
	if exp.Skew < 0 {
		return errors.New("declarations: VerifyDeclaration: negative clock skew")
	}
	return checkTrusted(trusted)
}

// verifyDeclaration is VerifyDeclaration from step 2's payload type on, once the
// caller's arguments are checked and the envelope is parsed.
func verifyDeclaration(env Envelope, trusted []ed25519.PublicKey, exp Expect) (Verified, error) {
	skew := exp.Skew
	if skew == 0 {
		skew = DefaultSkew
	}

	payload, signedBy, err := openParsed(env, PayloadTypeDeclaration, trusted) // 2, 3
	if err != nil {
		return Verified{}, err
	}

	var d Declaration // 4
	if err := decodeStrict(payload, &d); err != nil {
		return Verified{}, &MalformedError{What: "declaration", Signed: true, Reason: err.Error()}
	}
	if d.IssuedAt.IsZero() {
		return Verified{}, &MalformedError{What: "declaration", Signed: true, Reason: "issued_at is not set"}
	}
	if !d.ExpiresAt.After(d.IssuedAt) {
		return Verified{}, &MalformedError{What: "declaration", Signed: true, Reason: "expires_at is not after issued_at"}
	}

	if d.Mesh != exp.Mesh || d.Node != exp.Node || d.NodeKey != exp.NodeKey { // 5
		return Verified{}, &AudienceError{WantMesh: exp.Mesh, WantNode: exp.Node, WantKey: exp.NodeKey,
			GotMesh: d.Mesh, GotNode: d.Node, GotKey: d.NodeKey}
	}

	digest := d.Body.Digest()
	if d.KeyringEpoch < exp.KeyringEpoch { // 6
		return Verified{}, &OldKeyringError{Got: d.KeyringEpoch, Current: exp.KeyringEpoch, Version: d.Version, BodyDigest: digest}
	}

	same := false // 7
	if exp.HaveApplied {
		switch {
		case d.Version < exp.AppliedVersion:
			return Verified{}, &VersionError{What: "declaration version", Got: d.Version, Current: exp.AppliedVersion, BodyDigest: digest}
		case d.Version == exp.AppliedVersion && digest != exp.AppliedBodyDigest:
			return Verified{}, &ReplayedError{Version: d.Version}
		case d.Version == exp.AppliedVersion:
			same = true
		}
	}

	future := exp.FutureSkew
	if future <= 0 {
		future = DefaultFutureSkew
	}
	ahead := exp.Now.Before(d.IssuedAt.Add(-future)) // 8
	if ahead && !(same && exp.AppliedAnyIssueTime) {
		return Verified{}, &NotYetValidError{Version: d.Version, IssuedAt: d.IssuedAt, Now: exp.Now, Tolerance: future}
	}
	if exp.Now.After(d.ExpiresAt.Add(skew)) {
		return Verified{}, &ExpiredError{Version: d.Version, IssuedAt: d.IssuedAt, ExpiresAt: d.ExpiresAt, Now: exp.Now}
	}

	if err := d.Body.Validate(); err != nil { // 9
		// Signed: the node may name the version it refuses (reported as v0, it
		// named a version never declared).
		if be := (*BodyError)(nil); errors.As(err, &be) {
			be.Version = d.Version
		}
		return Verified{}, err
	}

	ids := make([]string, len(signedBy))
	for i, k := range signedBy {
		ids[i] = KeyID(k)
	}
	return Verified{Declaration: d, BodyDigest: digest, SignedBy: ids, SameAsApplied: same, IssuedAhead: ahead}, nil
}

// checkID returns why s is not a valid mesh or node id, or "": 1 to 63
// characters of a-z, 0-9 and '-', starting and ending with a letter or digit
// (docs/protocol.md).
func checkID(what, s string) string {
	// The reason is only spelled out for a bad id: this runs for every declaration
	// signed and verified, and formatting it each time was most of its cost.
	bad := func() string {
		return fmt.Sprintf("%s id %q is not 1 to 63 characters of a-z, 0-9 and '-' starting and ending with a letter or digit", what, clip(s, maxIDShown))
	}
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return bad()
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return bad()
		}
	}
	return ""
}

// checkNodeKey returns why s is not a node public key, or "": an nkey user
// public key is 56 characters of base32 (A-Z, 2-7) starting with 'U'.
func checkNodeKey(s string) string {
	bad := func() string {
		return fmt.Sprintf("node key %q is not an nkey user public key (56 characters of A-Z and 2-7, starting with U)", clip(s, maxIDShown))
	}
	if len(s) != 56 || s[0] != 'U' {
		return bad()
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('A' <= c && c <= 'Z' || '2' <= c && c <= '7') {
			return bad()
		}
	}
	return ""
}
