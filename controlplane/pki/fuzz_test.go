package pki

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"testing"
	"time"
)

// FuzzParsePEM reads arbitrary bytes as a certificate and as a private key, as a
// control node reads ca.pem, tls.pem and the key files. Neither parser may panic; a
// missing or cut PEM block is ErrNoCertificate or ErrNoKey; an accepted certificate
// is the DER of its block, and an accepted key encodes back to a key with the same
// public half.
func FuzzParsePEM(f *testing.F) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	ca, caKey, err := NewCA("demo", now)
	if err != nil {
		f.Fatal(err)
	}
	leaf, err := ca.IssueLeaf("cp-1", nil, now)
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range [][]byte{ca.CertPEM, caKey, leaf.CertPEM, leaf.KeyPEM, append(bytes.Clone(leaf.CertPEM), ca.CertPEM...),
		ca.CertPEM[:len(ca.CertPEM)/2], caKey[:len(caKey)-30], []byte("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"), {}} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		block, _ := pem.Decode(data)
		cert, err := ParseCertificatePEM(data)
		switch {
		case err == nil:
			if block == nil || block.Type != "CERTIFICATE" || !bytes.Equal(cert.Raw, block.Bytes) {
				t.Fatal("accepted a certificate that is not its first PEM block's DER")
			}
			again, err := ParseCertificatePEM(encodeCert(cert.Raw))
			if err != nil || !again.Equal(cert) {
				t.Fatalf("re-encoded certificate: %v", err)
			}
		case block == nil || block.Type != "CERTIFICATE":
			if !errors.Is(err, ErrNoCertificate) {
				t.Fatalf("no certificate block: %v, want ErrNoCertificate", err)
			}
		}
		key, err := ParseKeyPEM(data)
		switch {
		case err == nil:
			der, err := x509.MarshalPKCS8PrivateKey(key)
			if err != nil {
				t.Fatalf("an accepted key does not encode: %v", err)
			}
			again, err := ParseKeyPEM(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
			if err != nil || !publicKeysEqual(again.Public(), key.Public()) {
				t.Fatalf("re-encoded key: %v", err)
			}
		case block == nil || block.Type != "PRIVATE KEY":
			if !errors.Is(err, ErrNoKey) {
				t.Fatalf("no key block: %v, want ErrNoKey", err)
			}
		}
	})
}

// TestParsePEMCutShort: a certificate or key file that is empty, cut within its
// block, or of the other kind is ErrNoCertificate or ErrNoKey; one whose block is
// whole but whose DER is damaged is an x509 error, not those.
func TestParsePEMCutShort(t *testing.T) {
	ca, key, err := NewCA("demo", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"empty": nil, "cut": ca.CertPEM[:len(ca.CertPEM)-20], "a key": key, "garbage": []byte("garbage"),
	} {
		if _, err := ParseCertificatePEM(data); !errors.Is(err, ErrNoCertificate) {
			t.Errorf("certificate, %s: %v", name, err)
		}
	}
	for name, data := range map[string][]byte{
		"empty": nil, "cut": key[:len(key)-20], "a certificate": ca.CertPEM,
	} {
		if _, err := ParseKeyPEM(data); !errors.Is(err, ErrNoKey) {
			t.Errorf("key, %s: %v", name, err)
		}
	}
	damaged := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw[:len(ca.Cert.Raw)-5]})
	if _, err := ParseCertificatePEM(damaged); err == nil || errors.Is(err, ErrNoCertificate) {
		t.Errorf("damaged DER: %v", err)
	}
}
