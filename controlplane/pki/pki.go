// Package pki makes and loads the mesh's certificates: the mesh CA, the TLS leaves of
// control nodes (broker, Raft and cluster routes), and the TLS configurations that use
// them. Everything is generated in Go; no openssl, nothing fetched.
//
// Trust in the mesh is anchored on the CA's public key, not on names: a client checks
// that the chain the server presents reaches the CA whose SubjectPublicKeyInfo hash it
// holds (the pin), and nothing else. That is why leaves carry IP SANs for operators'
// convenience, but no verifier in the mesh depends on them.
package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"strings"
	"time"
)

// Validity periods. The CA outlives the leaves it issues in its first ten years. Both
// are renewed over the keys they have (CA.RenewLeaf, CA.Renew: meshctl control
// renew-certificate), which keeps every pin; serve, and `meshctl control status`
// for every control node, warn RenewWithin before either expires.
const (
	CAValidity   = 20 * 365 * 24 * time.Hour
	LeafValidity = 10 * 365 * 24 * time.Hour
	// RenewWithin is how long before a certificate expires that serve warns of it
	// in its log and `meshctl control status` names it: time to renew it
	// (docs/operations.md, "Certificate lifetimes") across a fleet's change windows.
	RenewWithin = 180 * 24 * time.Hour
	// backdate absorbs modest clock differences between the machine that issues a
	// certificate and the machines that check it.
	backdate = time.Hour
)

// ErrPinMismatch means the server presented a chain that does not reach the pinned CA:
// something other than the mesh answered. Retrying will not help.
var ErrPinMismatch = errors.New("the server's certificate does not chain to the pinned mesh CA: the mesh was substituted, or the address is wrong; retrying will not help")

// CA is the mesh certificate authority.
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	Key     crypto.Signer
}

// Pin returns the SHA-256 of the CA certificate's SubjectPublicKeyInfo (DER).
func (ca *CA) Pin() [32]byte { return PinOf(ca.Cert) }

// PinOf returns the SHA-256 of a certificate's SubjectPublicKeyInfo (DER).
func PinOf(cert *x509.Certificate) [32]byte { return sha256.Sum256(cert.RawSubjectPublicKeyInfo) }

// meshOrganization is the subject organization of a mesh's certificates: it
// names the mesh (NewCA, IssueLeaf).
const meshOrganization = "mesh "

// MeshOf returns the mesh a certificate NewCA made, or one it issued, names, and
// false for a certificate that names none. It identifies, does not verify: the
// chain to a pinned CA is what proves a certificate is the mesh's.
func MeshOf(cert *x509.Certificate) (string, bool) {
	if len(cert.Subject.Organization) != 1 {
		return "", false
	}
	mesh, ok := strings.CutPrefix(cert.Subject.Organization[0], meshOrganization)
	return mesh, ok && mesh != ""
}

// NewCA makes a mesh CA. It returns the CA and its private key in PEM.
func NewCA(mesh string, now time.Time) (*CA, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate CA key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "mesh CA " + mesh, Organization: []string{meshOrganization + mesh}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("self-sign CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return &CA{Cert: cert, CertPEM: encodeCert(der), Key: key}, keyPEM, nil
}

// LoadCA parses a CA certificate and its private key.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := ParseCertificatePEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("CA certificate: not a CA certificate")
	}
	key, err := ParseKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	if !publicKeysEqual(cert.PublicKey, key.Public()) {
		return nil, errors.New("CA key does not belong to the CA certificate")
	}
	return &CA{Cert: cert, CertPEM: certPEM, Key: key}, nil
}

// Leaf is a certificate issued by the mesh CA, with its key, both PEM-encoded.
type Leaf struct {
	CertPEM []byte
	KeyPEM  []byte
}

// IssueLeaf issues a TLS identity for a control node. The leaf is good for both server
// and client authentication, because control nodes dial each other (Raft, NATS routes)
// as well as answer clients.
func (ca *CA) IssueLeaf(commonName string, ips []net.IP, now time.Time) (Leaf, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Leaf{}, fmt.Errorf("generate leaf key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return Leaf{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: commonName, Organization: ca.Cert.Subject.Organization},
		NotBefore:    now.Add(-backdate),
		NotAfter:     now.Add(LeafValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return Leaf{}, fmt.Errorf("sign leaf: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return Leaf{}, err
	}
	return Leaf{CertPEM: encodeCert(der), KeyPEM: keyPEM}, nil
}

// ErrNoCertificate and ErrNoKey mean the data does not start with a PEM block of a
// certificate or of a private key (empty, cut within its first block, another kind).
var (
	ErrNoCertificate = errors.New("no PEM certificate found")
	ErrNoKey         = errors.New("no PEM private key found")
)

// ParseCertificatePEM parses the first certificate in a PEM block sequence.
func ParseCertificatePEM(data []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, ErrNoCertificate
	}
	return x509.ParseCertificate(block.Bytes)
}

// ParseKeyPEM parses a PKCS#8 private key.
func ParseKeyPEM(data []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, ErrNoKey
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, errors.New("private key cannot sign")
	}
	return s, nil
}

// Certificate builds a tls.Certificate whose chain carries the CA after the leaf, so a
// client that holds only the pin can find the CA in what the server presents.
func Certificate(leaf Leaf, caPEM []byte) (tls.Certificate, error) {
	chain := append(append([]byte{}, leaf.CertPEM...), caPEM...)
	cert, err := tls.X509KeyPair(chain, leaf.KeyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("TLS key pair: %w", err)
	}
	return cert, nil
}

// ServerConfig is the TLS configuration of a broker listener: TLS 1.3, the leaf with the
// CA in its chain.
func ServerConfig(leaf Leaf, caPEM []byte) (*tls.Config, error) {
	cert, err := Certificate(leaf, caPEM)
	if err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}}, nil
}

// MutualConfig is the TLS configuration between control nodes (Raft, NATS routes): both
// sides present CA-signed leaves and both verify the other's chain against the mesh CA
// alone; a client also checks the server's IP SAN against the address it dialled (set
// ServerName when dialling by hand; nats-server sets it from the route URL).
func MutualConfig(leaf Leaf, caPEM []byte) (*tls.Config, error) {
	cert, err := Certificate(leaf, caPEM)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("CA certificate: no certificate in PEM")
	}
	caCert, err := ParseCertificatePEM(caPEM)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:       tls.VersionTLS13,
		Certificates:     []tls.Certificate{cert},
		ClientAuth:       tls.RequireAndVerifyClientCert,
		ClientCAs:        pool,
		RootCAs:          pool,
		VerifyConnection: verifyChainTo(caCert),
	}, nil
}

// PinnedClientConfig returns a client TLS configuration that accepts exactly the servers
// whose presented chain reaches the CA with the given pin. It runs inside the handshake
// (VerifyConnection also runs on resumed sessions, unlike VerifyPeerCertificate), so a
// client using it sends no application byte to anything else.
func PinnedClientConfig(pin [32]byte) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		InsecureSkipVerify: true, //nolint:gosec // replaced by the pin check in VerifyConnection
		VerifyConnection: func(cs tls.ConnectionState) error {
			return VerifyPinnedChain(cs.PeerCertificates, pin)
		},
	}
}

// VerifyPinnedChain checks that the leaf (certs[0]) is signed by a CA certificate in
// certs whose SubjectPublicKeyInfo hashes to pin, and is valid for server auth now.
func VerifyPinnedChain(certs []*x509.Certificate, pin [32]byte) error {
	if len(certs) == 0 {
		return ErrPinMismatch
	}
	for _, c := range certs[1:] {
		if c.IsCA && PinOf(c) == pin {
			return verifyLeaf(certs[0], c, x509.ExtKeyUsageServerAuth)
		}
	}
	return ErrPinMismatch
}

func verifyChainTo(ca *x509.Certificate) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("peer presented no certificate")
		}
		return verifyLeaf(cs.PeerCertificates[0], ca, x509.ExtKeyUsageAny)
	}
}

func verifyLeaf(leaf, ca *x509.Certificate, usage x509.ExtKeyUsage) error {
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	opts := x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}}
	_, err := leaf.Verify(opts)
	if err == nil {
		return nil
	}
	// x509 checks validity periods before signatures: a certificate out of its
	// period says nothing yet of who signed it, so the chain is checked again at a
	// time inside both periods. If it verifies then, this is the mesh seen by a
	// clock that disagrees with the one that made its certificates: not a
	// substitution, and retrying helps once the clocks agree.
	var inv x509.CertificateInvalidError
	if errors.As(err, &inv) && inv.Reason == x509.Expired {
		at := leaf.NotBefore
		if ca.NotBefore.After(at) {
			at = ca.NotBefore
		}
		until := leaf.NotAfter
		if ca.NotAfter.Before(until) {
			until = ca.NotAfter
		}
		if at.Before(until) {
			opts.CurrentTime = at
			if _, again := leaf.Verify(opts); again == nil {
				return &ClockError{Now: time.Now(), NotBefore: at, NotAfter: until}
			}
		}
	}
	return fmt.Errorf("%w (%v)", ErrPinMismatch, err)
}

// ErrClock means the server's chain reaches the pinned CA but is not valid at this
// machine's time: this machine's clock, or the one that made the mesh's
// certificates, is wrong. It is the mesh; retrying helps once the clocks agree.
var ErrClock = errors.New("the server's certificate chains to the pinned mesh CA but is not valid at this machine's time")

// ClockError is a chain that reaches the pinned CA, valid only from NotBefore to
// NotAfter, checked at Now, outside. It matches ErrClock, never ErrPinMismatch.
type ClockError struct {
	Now, NotBefore, NotAfter time.Time
}

func (e *ClockError) Error() string {
	if e.Now.Before(e.NotBefore) {
		return fmt.Sprintf("%s: this machine's clock says %s, %s before the certificates are valid (from %s): this machine's clock is behind, or the mesh's certificates were made by a clock ahead (they are valid from then); set the clock that is wrong (NTP)",
			ErrClock, e.Now.UTC().Format(time.RFC3339), e.NotBefore.Sub(e.Now).Round(time.Second), e.NotBefore.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("%s: this machine's clock says %s, %s after the certificate expired (at %s): this machine's clock is ahead (set it), or, if it is right, that control node's certificate expired",
		ErrClock, e.Now.UTC().Format(time.RFC3339), e.Now.Sub(e.NotAfter).Round(time.Second), e.NotAfter.UTC().Format(time.RFC3339))
}

// Is reports whether target is ErrClock.
func (e *ClockError) Is(target error) bool { return target == ErrClock }

func randomSerial() (*big.Int, error) {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	return s, nil
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	da, err1 := x509.MarshalPKIXPublicKey(a)
	db, err2 := x509.MarshalPKIXPublicKey(b)
	return err1 == nil && err2 == nil && bytes.Equal(da, db)
}
