// Package pintls is the host's check of the broker it dials: the chain the server
// presents must reach the CA whose SubjectPublicKeyInfo hash is pinned (from the token,
// later from the identity file). Names are not checked: the token carries an address,
// and the pin is the whole identity.
package pintls

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
)

// ErrSubstituted means something other than the mesh answered: the server's chain
// does not reach the pinned CA. Retrying will not help.
var ErrSubstituted = errors.New("the broker's certificate does not chain to the CA pinned in the token: the mesh was substituted (or the token is for another mesh); retrying will not help")

// Config returns a client TLS configuration that completes a handshake only with a
// server whose chain reaches the pinned CA. The check runs in VerifyConnection, inside
// the handshake and also on resumed sessions, so nothing is sent to anyone else.
func Config(pin [32]byte) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// Chain and name verification are replaced by the stricter pin check below.
		InsecureSkipVerify: true, //nolint:gosec
		VerifyConnection: func(cs tls.ConnectionState) error {
			return Verify(cs.PeerCertificates, pin)
		},
	}
}

// Verify checks that certs[0] is signed by a CA certificate among certs whose
// SubjectPublicKeyInfo SHA-256 equals pin, and is valid now for server authentication.
func Verify(certs []*x509.Certificate, pin [32]byte) error {
	if len(certs) == 0 {
		return ErrSubstituted
	}
	for _, c := range certs[1:] {
		if !c.IsCA || sha256.Sum256(c.RawSubjectPublicKeyInfo) != pin {
			continue
		}
		roots := x509.NewCertPool()
		roots.AddCert(c)
		if _, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			return fmt.Errorf("%w (the pinned CA is presented, but the server certificate does not verify against it: %v)", ErrSubstituted, err)
		}
		return nil
	}
	return ErrSubstituted
}

// Pin returns the SHA-256 of a certificate's SubjectPublicKeyInfo.
func Pin(cert *x509.Certificate) [32]byte { return sha256.Sum256(cert.RawSubjectPublicKeyInfo) }
