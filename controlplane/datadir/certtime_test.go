package datadir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/pki"
)

// TestCertificatesOutOfTheirTime: a CA certificate or a leaf that expired, or that is
// not valid yet, at the time given is a CertificateTimeError (ErrCertificateTime,
// meshctl's exit 7) naming the file, its NotAfter (or NotBefore) and what to do:
// renew it where the CA key is, with the command here when this directory holds
// the key. Inside both periods nothing is said.
func TestCertificatesOutOfTheirTime(t *testing.T) {
	now := time.Now()
	ca, _, err := pki.NewCA("demo", now)
	if err != nil {
		t.Fatal(err)
	}
	leafPEM, err := ca.IssueLeaf("control cp-1", nil, now)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := pki.ParseCertificatePEM(leafPEM.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	d := Dir(t.TempDir())
	if err := d.CheckCertificateTimes(ca.Cert, leaf, now); err != nil {
		t.Fatalf("certificates just issued: %v", err)
	}
	if err := d.CheckCertificateTimes(ca.Cert, leaf, leaf.NotAfter.Add(-time.Minute)); err != nil {
		t.Fatalf("a minute before the leaf expires: %v", err)
	}

	// The leaf expired, the CA not: one error, for tls.pem.
	at := leaf.NotAfter.Add(72 * time.Hour)
	err = d.CheckCertificateTimes(ca.Cert, leaf, at)
	var te *CertificateTimeError
	if !errors.Is(err, ErrCertificateTime) || !errors.As(err, &te) || te.CA || !te.Expired() {
		t.Fatalf("an expired leaf: %v", err)
	}
	msg := err.Error()
	for _, want := range []string{d.Path(TLSCertFile), "expired at " + leaf.NotAfter.UTC().Format(time.RFC3339), "3 days ago",
		RenewCommand + " --data CA-DIR --certificate COPY", "clock"} {
		if !strings.Contains(msg, want) {
			t.Errorf("an expired leaf's message does not say %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, CACertFile+":") {
		t.Errorf("the CA, still valid, is blamed:\n%s", msg)
	}

	// Here the CA key is held: the command is the exact one.
	if err := os.WriteFile(d.Path(CAKeyFile), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	msg = d.CheckCertificateTimes(ca.Cert, leaf, at).Error()
	if want := RenewCommand + " --data " + string(d) + " --certificate " + d.Path(TLSCertFile); !strings.Contains(msg, want) {
		t.Errorf("with the CA key here, the message does not give %q:\n%s", want, msg)
	}

	// Both expired: both named, the CA first, and what to do with the new ca.pem.
	at = ca.Cert.NotAfter.Add(time.Hour)
	err = d.CheckCertificateTimes(ca.Cert, leaf, at)
	msg = err.Error()
	ci, li := strings.Index(msg, d.Path(CACertFile)+":"), strings.Index(msg, d.Path(TLSCertFile)+":")
	if ci < 0 || li < 0 || ci > li {
		t.Fatalf("both expired: want ca.pem then tls.pem named:\n%s", msg)
	}
	for _, want := range []string{"the mesh CA's certificate expired at " + ca.Cert.NotAfter.UTC().Format(time.RFC3339),
		"--certificate " + filepath.Join(string(d), CACertFile), "copy the new ca.pem into every control node's data directory"} {
		if !strings.Contains(msg, want) {
			t.Errorf("an expired CA's message does not say %q:\n%s", want, msg)
		}
	}

	// Not valid yet (this clock more than the backdate behind the issuer's): both,
	// and the clock is what is named.
	at = now.Add(-2 * time.Hour)
	err = d.CheckCertificateTimes(ca.Cert, leaf, at)
	if !errors.As(err, &te) || te.Expired() {
		t.Fatalf("not valid yet: %v", err)
	}
	msg = err.Error()
	for _, want := range []string{"is not valid until " + leaf.NotBefore.UTC().Format(time.RFC3339), "clock is behind"} {
		if !strings.Contains(msg, want) {
			t.Errorf("a certificate not valid yet: the message does not say %q:\n%s", want, msg)
		}
	}
}
