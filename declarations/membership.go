package declarations

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"
)

// PayloadTypeMembership is the type of the signed list of the mesh's brokers.
const PayloadTypeMembership = "application/vnd.mesh.membership.v1+json"

// MaxBrokers bounds the brokers one membership lists.
const MaxBrokers = 64

// Membership tells every node where the mesh's brokers are: the broker address of
// each control node, at a version that grows with every change of the control plane.
// It is signed like a declaration, so a broker cannot redirect hosts elsewhere (and
// every broker a host dials is checked against the pin besides).
type Membership struct {
	Mesh    string `json:"mesh"`
	Version uint64 `json:"version"`
	// Brokers are ip:port addresses, 1 to MaxBrokers, no duplicates, in the order
	// the control nodes joined.
	Brokers  []string  `json:"brokers"`
	IssuedAt time.Time `json:"issued_at"`
}

func (m Membership) check() string {
	switch n := len(m.Brokers); {
	case n == 0:
		return "it lists no broker"
	case n > MaxBrokers:
		return fmt.Sprintf("it lists %d brokers, at most %d are allowed", n, MaxBrokers)
	}
	for i, b := range m.Brokers {
		ap, err := netip.ParseAddrPort(b)
		if err != nil || ap.String() != b || !ap.Addr().IsValid() || ap.Port() == 0 {
			return fmt.Sprintf("broker %d (%q) is not a canonical ip:port", i, clip(b, maxIDShown))
		}
		if slices.Contains(m.Brokers[:i], b) {
			return fmt.Sprintf("broker %d (%s) is listed twice", i, b)
		}
	}
	if m.IssuedAt.IsZero() {
		return "issued_at is not set"
	}
	return ""
}

// SignMembership checks m (mesh id, brokers, issued_at) and returns it signed as an
// envelope of type PayloadTypeMembership.
func SignMembership(m Membership, keys ...ed25519.PrivateKey) ([]byte, error) {
	if r := checkID("mesh", m.Mesh); r != "" {
		return nil, errors.New("declarations: cannot sign membership: " + r)
	}
	if r := m.check(); r != "" {
		return nil, errors.New("declarations: cannot sign membership: " + r)
	}
	m.IssuedAt = m.IssuedAt.UTC()
	payload, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("declarations: encoding membership: %w", err)
	}
	return SignEnvelope(PayloadTypeMembership, payload, keys...)
}

// VerifyMembership checks a membership envelope against the keys the node trusts and
// the version it holds (0 before any). In order: size cap and shape (ErrTooLarge,
// *MalformedError); a valid signature by a trusted key (ErrUntrusted); the payload,
// strictly, with its brokers (*MalformedError, Signed); mesh (*AudienceError,
// ErrWrongMesh); the version: older than current is *VersionError (ErrRolledBack),
// the same version is accepted only with the same brokers (ErrReplayed otherwise).
func VerifyMembership(raw []byte, trusted []ed25519.PublicKey, mesh string, current uint64, currentBrokers []string) (Membership, error) {
	if err := checkMembershipArgs(trusted, mesh); err != nil {
		return Membership{}, err
	}
	env, err := parseEnvelope(raw)
	if err != nil {
		return Membership{}, err
	}
	return verifyMembership(env, trusted, mesh, current, currentBrokers)
}

// VerifyMembership is VerifyMembership of the envelope p was parsed from.
func (p *Parsed) VerifyMembership(trusted []ed25519.PublicKey, mesh string, current uint64, currentBrokers []string) (Membership, error) {
	if err := checkMembershipArgs(trusted, mesh); err != nil {
		return Membership{}, err
	}
	return verifyMembership(p.env, trusted, mesh, current, currentBrokers)
}

func checkMembershipArgs(trusted []ed25519.PublicKey, mesh string) error {
	if r := checkID("mesh", mesh); r != "" {
		return errors.New("declarations: VerifyMembership: " + r)
	}
	return checkTrusted(trusted)
}

func verifyMembership(env Envelope, trusted []ed25519.PublicKey, mesh string, current uint64, currentBrokers []string) (Membership, error) {
	payload, _, err := openParsed(env, PayloadTypeMembership, trusted)
	if err != nil {
		return Membership{}, err
	}
	var m Membership
	if err := decodeStrict(payload, &m); err != nil {
		return Membership{}, &MalformedError{What: "membership", Signed: true, Reason: err.Error()}
	}
	if r := m.check(); r != "" {
		return Membership{}, &MalformedError{What: "membership", Signed: true, Reason: r}
	}
	if m.Mesh != mesh {
		return Membership{}, &AudienceError{WantMesh: mesh, GotMesh: m.Mesh}
	}
	switch {
	case m.Version < current:
		return Membership{}, &VersionError{What: "membership version", Got: m.Version, Current: current}
	case m.Version == current && current != 0 && !slices.Equal(m.Brokers, currentBrokers):
		return Membership{}, fmt.Errorf("%w: membership version %d is already held with other brokers", ErrReplayed, m.Version)
	}
	return m, nil
}
