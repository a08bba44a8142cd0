package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// ErrBadControlProof refuses a control token whose claim the mesh CA did not sign:
// control tokens are minted where the CA key is, and nowhere else.
var ErrBadControlProof = errors.New("the control token is not signed by the mesh CA: control tokens are minted on the control node that holds the CA key (meshctl token --role control there)")

// ControlClaim is what the holder of the CA key vouches for when it mints a control
// token: the token (by the hash of its secret, and by the key that proves the
// secret), the node and addresses it admits, the TLS key and operator credentials it
// issued for that node, the identity it sealed under the secret, and until when.
// The control plane admits a control node only with a claim the CA signed, so
// operator credentials alone mint no control identity and obtain no signing key:
// not even with a claim taken from the CA holder's request, which admits only the
// holder of that token's secret, and only until the claim expires (after which a
// purged token's id could be registered again).
type ControlClaim struct {
	Mesh, TokenID, Node   string
	Broker, Raft, Cluster string
	Pin                   string // LeafPin of the issued leaf
	Operator              string // public key of the issued operator credentials
	ProofKey              string // hex tokenfmt.Token.ProofKey of the token
	SealedSum             string // hex SHA-256 of the identity sealed under the token's secret
	Expiry                time.Time
}

// controlClaimTag separates these signatures from anything else the CA key signs.
// Version 1 covered neither the proof key, the sealed identity nor an expiry: no
// control plane of this version takes it.
const controlClaimTag = "mesh control token claim v2"

// SealedSum is a ControlClaim's SealedSum of sealed.
func SealedSum(sealed []byte) string {
	sum := sha256.Sum256(sealed)
	return hex.EncodeToString(sum[:])
}

// digest hashes the claim's fields, each length-prefixed, after the tag; the expiry
// in whole seconds since 1970.
func (c ControlClaim) digest() []byte {
	h := sha256.New()
	for _, f := range []string{controlClaimTag, c.Mesh, c.TokenID, c.Node, c.Broker, c.Raft, c.Cluster, c.Pin, c.Operator,
		c.ProofKey, c.SealedSum, strconv.FormatInt(c.Expiry.Unix(), 10)} {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	return h.Sum(nil)
}

// SignControlClaim signs c with the CA key.
func (ca *CA) SignControlClaim(c ControlClaim) ([]byte, error) {
	sig, err := ca.Key.Sign(rand.Reader, c.digest(), crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf("sign the control token's claim with the CA key: %w", err)
	}
	return sig, nil
}

// VerifyControlClaim checks that the CA of caCert signed c; ErrBadControlProof if not.
func VerifyControlClaim(caCert *x509.Certificate, c ControlClaim, sig []byte) error {
	pub, ok := caCert.PublicKey.(*ecdsa.PublicKey)
	if !ok || len(sig) == 0 || !ecdsa.VerifyASN1(pub, c.digest(), sig) {
		return ErrBadControlProof
	}
	return nil
}

// LeafPin is the pin of a leaf's key as the mesh records it for a control node: hex
// SHA-256 of its SubjectPublicKeyInfo, the form nats-server's pinned certificates
// take.
func LeafPin(cert *x509.Certificate) string {
	p := PinOf(cert)
	return hex.EncodeToString(p[:])
}

// LeafPinPEM is LeafPin of a PEM certificate.
func LeafPinPEM(certPEM []byte) (string, error) {
	cert, err := ParseCertificatePEM(certPEM)
	if err != nil {
		return "", err
	}
	return LeafPin(cert), nil
}
