package pki

import (
	"bytes"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"time"
)

// Renewal re-issues a certificate over the key it already has, with a fresh
// validity. Every pin in the mesh is of a key (SHA-256 of the SubjectPublicKeyInfo),
// not of a certificate: the CA pin that tokens, hosts and operators hold, and the
// control nodes' LeafPin that routes and Raft accept. A renewed certificate
// therefore keeps every pin, and nothing but the file changes (docs/operations.md,
// "Certificate lifetimes").

// ErrNotIssuedByCA means a certificate given for renewal was not signed by this
// CA's key: another mesh's, or not a mesh certificate at all.
var ErrNotIssuedByCA = errors.New("not issued by this mesh's CA")

// RenewLeaf re-issues old, a leaf this CA's key signed, over old's own public key:
// the same subject and addresses (IP SANs, and any DNS names), the usages IssueLeaf
// gives (server and client authentication), valid from now (less the backdate) for
// LeafValidity. The result is checked before it is returned: it chains to the CA
// at now, for both usages, and its LeafPin is old's.
func (ca *CA) RenewLeaf(old *x509.Certificate, now time.Time) (certPEM []byte, cert *x509.Certificate, err error) {
	return ca.reissueLeaf(old, now.Add(-backdate), now.Add(LeafValidity), now)
}

func (ca *CA) reissueLeaf(old *x509.Certificate, notBefore, notAfter, now time.Time) ([]byte, *x509.Certificate, error) {
	if old.IsCA {
		return nil, nil, errors.New("a CA certificate, not a control node's: renew the CA's own with Renew")
	}
	if err := old.CheckSignatureFrom(ca.Cert); err != nil {
		return nil, nil, fmt.Errorf("%w (%v)", ErrNotIssuedByCA, err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		// The subject as it was, byte for byte.
		RawSubject:  old.RawSubject,
		Subject:     old.Subject,
		NotBefore:   notBefore,
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: old.IPAddresses,
		DNSNames:    old.DNSNames,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, old.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("sign the renewed certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	if LeafPin(cert) != LeafPin(old) {
		return nil, nil, errors.New("the renewed certificate's key is not the old one's: its pin would change")
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if err := verifyAt(cert, ca.Cert, usage, now); err != nil {
			return nil, nil, fmt.Errorf("the renewed certificate does not verify under the CA: %w", err)
		}
	}
	return encodeCert(der), cert, nil
}

// Renew re-issues the CA's own certificate over the same key, with the same subject
// and key identifier, valid from now (less the backdate) for CAValidity. The CA pin
// is unchanged, and every certificate the CA issued, before or after, verifies
// under either certificate: they are the same issuer. The result is checked before
// it is returned.
func (ca *CA) Renew(now time.Time) (*CA, error) {
	return ca.reissue(now.Add(-backdate), now.Add(CAValidity))
}

func (ca *CA) reissue(notBefore, notAfter time.Time) (*CA, error) {
	old := ca.Cert
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		RawSubject:            old.RawSubject,
		Subject:               old.Subject,
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              old.KeyUsage,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            old.MaxPathLen,
		MaxPathLenZero:        old.MaxPathLenZero,
		// Leaves name their issuer's key by it (AuthorityKeyId).
		SubjectKeyId:   old.SubjectKeyId,
		AuthorityKeyId: old.AuthorityKeyId,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, old.PublicKey, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("self-sign the renewed CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	switch {
	case PinOf(cert) != PinOf(old):
		return nil, errors.New("the renewed CA certificate's key is not the CA's: its pin would change")
	case !bytes.Equal(cert.RawSubject, old.RawSubject) || !bytes.Equal(cert.SubjectKeyId, old.SubjectKeyId):
		return nil, errors.New("the renewed CA certificate does not keep the CA's name and key identifier")
	}
	if err := cert.CheckSignatureFrom(cert); err != nil {
		return nil, fmt.Errorf("the renewed CA certificate is not self-signed: %w", err)
	}
	return &CA{Cert: cert, CertPEM: encodeCert(der), Key: ca.Key}, nil
}

// verifyAt checks that leaf chains to ca alone, for usage, at now.
func verifyAt(leaf, ca *x509.Certificate, usage x509.ExtKeyUsage, now time.Time) error {
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}, CurrentTime: now})
	return err
}
