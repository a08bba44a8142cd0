package tokenfmt

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"time"
)

// MintOptions are the inputs to Mint.
type MintOptions struct {
	Mesh       string
	Brokers    []netip.AddrPort
	CAPin      [32]byte // PinOf(mesh CA certificate); required
	SigningKey ed25519.PublicKey
	Node       string
	Role       Role          // "" means RoleWorker, the role that hands over least
	TTL        time.Duration // required: more than zero, at most MaxTTL; usually DefaultTTL
	Now        time.Time     // the zero time means time.Now()
	Rand       io.Reader     // nil means crypto/rand
}

// Mint makes a new token with a fresh secret read from o.Rand. Every field is checked
// before any randomness is read; a bad field is a *FieldError. The expiry is Now+TTL
// rounded down to a whole second, so the lifetime never exceeds MaxTTL. The caller
// stores SecretHash, never the secret, and hands Encode to the operator.
func Mint(o MintOptions) (Token, error) {
	if err := checkTTL(o.TTL); err != nil {
		return Token{}, err
	}
	role := o.Role
	if role == "" {
		role = RoleWorker
	}
	now := o.Now
	if now.IsZero() {
		now = time.Now()
	}
	t := Token{
		Mesh:       o.Mesh,
		Brokers:    slices.Clone(o.Brokers),
		CAPin:      o.CAPin,
		SigningKey: slices.Clone(o.SigningKey),
		Node:       o.Node,
		Role:       role,
		Expiry:     time.Unix(now.Add(o.TTL).Unix(), 0).UTC(),
	}
	// The secret is not filled in yet; a placeholder lets Validate check the rest
	// without consuming randomness for a token that will be refused.
	probe := t
	probe.Secret[0] = 1
	if err := probe.Validate(); err != nil {
		return Token{}, err
	}

	r := o.Rand
	if r == nil {
		r = rand.Reader
	}
	if _, err := io.ReadFull(r, t.Secret[:]); err != nil {
		return Token{}, fmt.Errorf("tokenfmt: reading the token secret from the random source: %w", err)
	}
	if t.Secret == ([SecretSize]byte{}) {
		return Token{}, errors.New("tokenfmt: the random source returned all zeros for the token secret; refusing to mint a guessable token")
	}
	return t, nil
}

func checkTTL(ttl time.Duration) error {
	switch {
	case ttl <= 0:
		return detail(ErrTTL, "the token lifetime must be more than zero and at most %v (the default is %v)", MaxTTL, DefaultTTL)
	case ttl < time.Second:
		return detail(ErrTTL, "the token lifetime %v is under one second, and expiry is counted in whole seconds: ask for at least 1s", ttl)
	case ttl > MaxTTL:
		return detail(ErrTTL, "the token lifetime %v is over the %v cap: a join is an operator at a terminal, and a long-lived token is a long-lived root credential for the mesh; mint it when the machine is ready to join", ttl, MaxTTL)
	}
	return nil
}
