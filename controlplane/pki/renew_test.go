package pki

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"slices"
	"testing"
	"time"
)

// TestRenewLeafKeepsItsPin: a leaf re-issued by RenewLeaf has the old one's key (its
// LeafPin, which routes and Raft accept), subject and addresses, a fresh validity of
// LeafValidity, both usages, and chains to the CA; the old leaf may have expired.
// A leaf of another CA, or the CA's own certificate, is refused.
func TestRenewLeafKeepsItsPin(t *testing.T) {
	now := time.Now()
	// A CA valid from three days ago, which issued a leaf that expired a day ago.
	ca, err := newCA(t, "demo").reissue(now.Add(-72*time.Hour), now.Add(CAValidity))
	if err != nil {
		t.Fatal(err)
	}
	ips := []net.IP{net.IPv4(127, 0, 0, 1), net.IPv4(10, 0, 0, 2)}
	oldPEM, oldCert, err := ca.reissueLeaf(mustLeaf(t, ca, ips), now.Add(-48*time.Hour), now.Add(-24*time.Hour), now.Add(-36*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if VerifyPinnedChain([]*x509.Certificate{oldCert, ca.Cert}, ca.Pin()) == nil {
		t.Fatal("the expired leaf verifies: the test proves nothing")
	}
	newPEM, cert, err := ca.RenewLeaf(oldCert, now)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(parse(t, newPEM).Raw, cert.Raw) || bytes.Equal(newPEM, oldPEM) {
		t.Fatal("the PEM is not the renewed certificate")
	}
	if LeafPin(cert) != LeafPin(oldCert) {
		t.Fatalf("the pin changed: %s, was %s", LeafPin(cert), LeafPin(oldCert))
	}
	if !bytes.Equal(cert.RawSubject, oldCert.RawSubject) || cert.Subject.CommonName != "control cp-2" {
		t.Errorf("subject %q, was %q", cert.Subject, oldCert.Subject)
	}
	if !slices.EqualFunc(cert.IPAddresses, ips, net.IP.Equal) {
		t.Errorf("IP SANs %v, want %v", cert.IPAddresses, ips)
	}
	if cert.SerialNumber.Cmp(oldCert.SerialNumber) == 0 {
		t.Error("the serial number was reused")
	}
	if d := cert.NotAfter.Sub(now); d < LeafValidity-time.Minute || d > LeafValidity+time.Minute {
		t.Errorf("valid for %s from now, want %s", d, LeafValidity)
	}
	if cert.NotBefore.After(now) {
		t.Errorf("not valid before %s, after now", cert.NotBefore)
	}
	if err := VerifyPinnedChain([]*x509.Certificate{cert, ca.Cert}, ca.Pin()); err != nil {
		t.Fatalf("the renewed leaf does not chain to the pinned CA: %v", err)
	}
	if err := verifyLeaf(cert, ca.Cert, x509.ExtKeyUsageClientAuth); err != nil {
		t.Fatalf("the renewed leaf is no client certificate (routes, Raft): %v", err)
	}

	// Refused: another CA's leaf, and the CA's own certificate.
	other := newCA(t, "other")
	if _, _, err := ca.RenewLeaf(mustLeaf(t, other, ips), now); !errors.Is(err, ErrNotIssuedByCA) {
		t.Errorf("another CA's leaf: %v, want ErrNotIssuedByCA", err)
	}
	if _, _, err := ca.RenewLeaf(ca.Cert, now); err == nil {
		t.Error("the CA's own certificate renewed as a leaf")
	}
}

// TestRenewCAKeepsItsPin: the CA certificate re-issued by Renew has the same key (the
// CA pin every token, host and operator holds), subject and key identifier, and a
// fresh CAValidity. Leaves issued under the old certificate verify under the new
// one, by pin as hosts check and by chain as control nodes do, even past the old
// certificate's expiry; leaves issued after verify under the old one too, so nodes
// may take the new ca.pem one at a time.
func TestRenewCAKeepsItsPin(t *testing.T) {
	now := time.Now()
	fresh := newCA(t, "demo")
	// A CA certificate that expires in an hour, over the mesh's key.
	old, err := fresh.reissue(now.Add(-48*time.Hour), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	leaf := mustLeaf(t, old, loopback)
	renewed, err := old.Renew(now)
	if err != nil {
		t.Fatal(err)
	}
	c := renewed.Cert
	if renewed.Pin() != old.Pin() {
		t.Fatal("the CA pin changed")
	}
	if !bytes.Equal(c.RawSubject, old.Cert.RawSubject) || len(c.SubjectKeyId) == 0 || !bytes.Equal(c.SubjectKeyId, old.Cert.SubjectKeyId) {
		t.Fatalf("subject %q key id %x, was %q %x", c.Subject, c.SubjectKeyId, old.Cert.Subject, old.Cert.SubjectKeyId)
	}
	if !c.IsCA || !c.MaxPathLenZero || c.KeyUsage != old.Cert.KeyUsage {
		t.Fatalf("constraints: IsCA=%v zero=%v usage=%v", c.IsCA, c.MaxPathLenZero, c.KeyUsage)
	}
	if d := c.NotAfter.Sub(now); d < CAValidity-time.Minute || d > CAValidity+time.Minute {
		t.Fatalf("valid for %s from now, want %s", d, CAValidity)
	}
	if !bytes.Equal(parse(t, renewed.CertPEM).Raw, c.Raw) {
		t.Fatal("CertPEM is not the certificate")
	}
	// The old leaf under the new CA: now, and a day after the old CA expired.
	later := now.Add(25 * time.Hour)
	for _, at := range []time.Time{now, later} {
		if err := verifyAt(leaf, c, x509.ExtKeyUsageServerAuth, at); err != nil {
			t.Errorf("at %s, the leaf issued before does not verify under the renewed CA: %v", at, err)
		}
	}
	if err := verifyAt(leaf, old.Cert, x509.ExtKeyUsageServerAuth, later); err == nil {
		t.Error("the old CA certificate still verifies past its expiry: the test proves nothing")
	}
	if err := VerifyPinnedChain([]*x509.Certificate{leaf, c}, old.Pin()); err != nil {
		t.Errorf("a host holding the CA pin refuses the old leaf with the renewed CA: %v", err)
	}
	if err := verifyChainTo(c)(connState(leaf, old.Cert)); err != nil {
		t.Errorf("a control node with the renewed ca.pem refuses a peer presenting the old chain: %v", err)
	}
	if err := verifyChainTo(old.Cert)(connState(mustLeaf(t, renewed, loopback), c)); err != nil {
		t.Errorf("a control node with the old ca.pem refuses a leaf issued after the renewal: %v", err)
	}
	// Renewing leaves and the CA in turn: a leaf renewed by the renewed CA.
	if _, _, err := renewed.RenewLeaf(leaf, now); err != nil {
		t.Errorf("the renewed CA cannot renew a leaf the old certificate issued: %v", err)
	}
}

// mustLeaf issues a leaf "control cp-2" for ips and parses it.
func mustLeaf(t *testing.T, ca *CA, ips []net.IP) *x509.Certificate {
	t.Helper()
	l, err := ca.IssueLeaf("control cp-2", ips, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return parse(t, l.CertPEM)
}

// connState is what a TLS peer presenting leaf and ca looks like to VerifyConnection.
func connState(leaf, ca *x509.Certificate) tls.ConnectionState {
	return tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf, ca}}
}
