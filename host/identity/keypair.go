package identity

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"

	"github.com/nats-io/nkeys"
)

// KeyPair is a node's nkeys user key pair, its Ed25519 key derived from the seed
// once. It has the methods of nkeys.KeyPair that a host uses, with the same results.
//
// nkeys' own key pair keeps only the encoded seed and derives the Ed25519 key from it
// again on every Sign and PublicKey: a scalar multiplication each, which took a
// nonce's signature from 23 to 44 µs here (BenchmarkSignNonce). A host signs the
// broker's nonce on every connection it opens, and enrolment asks for the public key
// and signs several times; each paid it again.
type KeyPair struct {
	seed []byte // the encoded nkeys seed, as the identity file holds it
	pub  string
	priv ed25519.PrivateKey
}

// NewKeyPair generates a new node key pair.
func NewKeyPair() (*KeyPair, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	seed, err := nkeys.EncodeSeed(nkeys.PrefixByteUser, priv.Seed())
	if err != nil {
		return nil, err
	}
	pub, err := nkeys.Encode(nkeys.PrefixByteUser, priv.Public().(ed25519.PublicKey))
	if err != nil {
		return nil, err
	}
	return &KeyPair{seed: seed, pub: string(pub), priv: priv}, nil
}

// decodeUserSeed decodes an nkeys user seed without ever quoting it. Any 32 bytes
// are an Ed25519 seed, so a seed that decodes is a valid key: checking one needs no
// key derived from it (a scalar multiplication).
func decodeUserSeed(seed string) ([]byte, error) {
	if seed == "" {
		return nil, invalid("nkey_seed", "is missing")
	}
	prefix, raw, err := nkeys.DecodeSeed([]byte(seed))
	if err != nil {
		return nil, invalid("nkey_seed", "is not a valid nkeys seed")
	}
	if prefix != nkeys.PrefixByteUser {
		clear(raw)
		return nil, invalid("nkey_seed", "is an nkeys seed but not a user seed")
	}
	return raw, nil
}

// checkUserSeed reports whether seed is an nkeys user seed, as userKeyPair would.
func checkUserSeed(seed string) error {
	raw, err := decodeUserSeed(seed)
	clear(raw)
	return err
}

// userKeyPair decodes an nkeys user seed without ever quoting it.
func userKeyPair(seed string) (*KeyPair, error) {
	raw, err := decodeUserSeed(seed)
	if err != nil {
		return nil, err
	}
	priv := ed25519.NewKeyFromSeed(raw)
	clear(raw)
	pub, err := nkeys.Encode(nkeys.PrefixByteUser, priv.Public().(ed25519.PublicKey))
	if err != nil {
		return nil, invalid("nkey_seed", "is not a valid nkeys seed")
	}
	return &KeyPair{seed: []byte(seed), pub: string(pub), priv: priv}, nil
}

// errWiped is the error of a key pair used after Wipe.
var errWiped = errors.New("identity: the key pair was wiped")

// PublicKey returns the encoded public key (U...).
func (k *KeyPair) PublicKey() (string, error) {
	if k.priv == nil {
		return "", errWiped
	}
	return k.pub, nil
}

// Seed returns the encoded seed, the secret the identity file keeps.
func (k *KeyPair) Seed() ([]byte, error) {
	if k.priv == nil {
		return nil, errWiped
	}
	return k.seed, nil
}

// Sign signs input with the node's key. Its signature is nats.Nkey's callback.
func (k *KeyPair) Sign(input []byte) ([]byte, error) {
	if k.priv == nil {
		return nil, errWiped
	}
	return ed25519.Sign(k.priv, input), nil
}

// Verify checks sig over input against the node's public key.
func (k *KeyPair) Verify(input, sig []byte) error {
	if k.priv == nil {
		return errWiped
	}
	if !ed25519.Verify(k.priv.Public().(ed25519.PublicKey), input, sig) {
		return nkeys.ErrInvalidSignature
	}
	return nil
}

// Wipe overwrites the key material; the key pair is unusable afterwards.
func (k *KeyPair) Wipe() {
	clear(k.seed)
	clear(k.priv)
	k.seed, k.priv = nil, nil
}

// String describes the key pair by its public key alone, as do GoString, LogValue
// and MarshalJSON: %v, %+v, %#v, slog and json.Marshal never show the seed or the
// private key.
func (k KeyPair) String() string { return "identity.KeyPair{PublicKey:" + k.pub + "}" }

// GoString is String.
func (k KeyPair) GoString() string { return k.String() }

// Format implements fmt.Formatter, so that no verb reaches the seed or the private
// key: without it %d, %x of a pointer, or any verb but %v, %s and %q of a KeyPair
// held in another struct, would print the fields.
func (k KeyPair) Format(f fmt.State, verb rune) {
	var s string
	switch verb {
	case 'v', 's':
		s = k.String()
	case 'q':
		s = strconv.Quote(k.String())
	default:
		s = "%!" + string(verb) + "(identity.KeyPair=" + k.String() + ")"
	}
	io.WriteString(f, s)
}

// LogValue is the public key.
func (k KeyPair) LogValue() slog.Value { return slog.StringValue(k.String()) }

// MarshalJSON encodes the public key only.
func (k KeyPair) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		PublicKey string `json:"public_key"`
	}{k.pub})
}
