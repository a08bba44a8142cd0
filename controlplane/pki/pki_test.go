package pki

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

var loopback = []net.IP{net.IPv4(127, 0, 0, 1)}

func newCA(t testing.TB, mesh string) *CA {
	t.Helper()
	ca, _, err := NewCA(mesh, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func leafOf(t testing.TB, ca *CA, cn string) Leaf {
	t.Helper()
	l, err := ca.IssueLeaf(cn, loopback, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func parse(t testing.TB, pemData []byte) *x509.Certificate {
	t.Helper()
	c, err := ParseCertificatePEM(pemData)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestNewCA(t *testing.T) {
	now := time.Now()
	ca, keyPEM, err := NewCA("demo", now)
	if err != nil {
		t.Fatal(err)
	}
	c := ca.Cert
	if !c.IsCA || !c.BasicConstraintsValid || c.MaxPathLen != 0 || !c.MaxPathLenZero {
		t.Fatalf("CA constraints: IsCA=%v MaxPathLen=%d zero=%v", c.IsCA, c.MaxPathLen, c.MaxPathLenZero)
	}
	if c.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Fatal("CA cannot sign certificates")
	}
	if !strings.Contains(c.Subject.CommonName, "demo") {
		t.Fatalf("CA subject %q does not name the mesh", c.Subject)
	}
	if c.NotBefore.After(now) || c.NotAfter.Before(now.Add(CAValidity-time.Minute)) {
		t.Fatalf("CA validity %v – %v", c.NotBefore, c.NotAfter)
	}
	if err := c.CheckSignatureFrom(c); err != nil {
		t.Fatalf("CA is not self-signed: %v", err)
	}
	if !bytes.Equal(parse(t, ca.CertPEM).Raw, c.Raw) {
		t.Fatal("CertPEM is not the certificate")
	}
	key, err := ParseKeyPEM(keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if !publicKeysEqual(key.Public(), c.PublicKey) {
		t.Fatal("the returned key PEM is not the CA's key")
	}
	// Two CAs never share a key or serial.
	other := newCA(t, "demo")
	if other.Pin() == ca.Pin() || other.Cert.SerialNumber.Cmp(c.SerialNumber) == 0 {
		t.Fatal("two CAs share a key or a serial")
	}
}

// TestMeshOf: the CA and the leaves it issues name the mesh; a certificate of
// another subject names none.
func TestMeshOf(t *testing.T) {
	ca, _, err := NewCA("m-1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.IssueLeaf("cp-1", nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ParseCertificatePEM(leaf.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*x509.Certificate{"CA": ca.Cert, "leaf": cert} {
		if mesh, ok := MeshOf(c); !ok || mesh != "m-1" {
			t.Errorf("%s: %q %t, want m-1", name, mesh, ok)
		}
	}
	for _, org := range [][]string{nil, {"mesh "}, {"other m-1"}, {"mesh m-1", "mesh m-2"}} {
		if mesh, ok := MeshOf(&x509.Certificate{Subject: pkix.Name{Organization: org}}); ok {
			t.Errorf("organization %q names mesh %q", org, mesh)
		}
	}
}

func TestPin(t *testing.T) {
	ca := newCA(t, "demo")
	want := sha256.Sum256(ca.Cert.RawSubjectPublicKeyInfo)
	if ca.Pin() != want || PinOf(ca.Cert) != want {
		t.Fatal("pin is not the SHA-256 of the SubjectPublicKeyInfo")
	}
	// The pin is of the key, not of the whole certificate.
	if sha256.Sum256(ca.Cert.Raw) == want {
		t.Fatal("pin equals the certificate hash")
	}
	// Re-parsing the PEM gives the same pin.
	if PinOf(parse(t, ca.CertPEM)) != want {
		t.Fatal("pin changed through PEM")
	}
}

func TestIssueLeaf(t *testing.T) {
	ca := newCA(t, "demo")
	ips := []net.IP{net.IPv4(127, 0, 0, 1), net.ParseIP("2001:db8::1")}
	now := time.Now()
	l, err := ca.IssueLeaf("control cp-1", ips, now)
	if err != nil {
		t.Fatal(err)
	}
	cert := parse(t, l.CertPEM)
	if cert.IsCA {
		t.Fatal("a leaf is a CA")
	}
	if cert.Subject.CommonName != "control cp-1" {
		t.Fatalf("CN = %q", cert.Subject.CommonName)
	}
	if !slices.EqualFunc(cert.IPAddresses, ips, net.IP.Equal) {
		t.Fatalf("IP SANs = %v, want %v", cert.IPAddresses, ips)
	}
	if cert.NotBefore.After(now.Add(-time.Minute)) {
		t.Fatalf("leaf not backdated: NotBefore %v", cert.NotBefore)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Errorf("leaf does not verify for usage %v: %v", usage, err)
		}
	}
	// The leaf does not verify under another CA.
	other := x509.NewCertPool()
	other.AddCert(newCA(t, "demo").Cert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: other}); err == nil {
		t.Fatal("leaf verifies under another CA")
	}
	key, err := ParseKeyPEM(l.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if !publicKeysEqual(key.Public(), cert.PublicKey) {
		t.Fatal("leaf key does not match its certificate")
	}
	// A leaf cannot issue: a certificate signed by a control node's leaf key does not
	// reach the pin, even with the leaf and the CA in the chain.
	sub := issue(t, &CA{Cert: cert, Key: key}, func(*x509.Certificate) {})
	if err := VerifyPinnedChain([]*x509.Certificate{sub, cert, ca.Cert}, ca.Pin()); !errors.Is(err, ErrPinMismatch) {
		t.Fatalf("a leaf-issued certificate: err = %v, want ErrPinMismatch", err)
	}
}

func TestLoadCA(t *testing.T) {
	ca, keyPEM, err := NewCA("demo", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadCA(ca.CertPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if loaded.Pin() != ca.Pin() {
		t.Fatal("loaded CA has another pin")
	}
	// The loaded CA issues leaves that verify under the original.
	l := leafOf(t, loaded, "x")
	if err := VerifyPinnedChain([]*x509.Certificate{parse(t, l.CertPEM), ca.Cert}, ca.Pin()); err != nil {
		t.Fatal(err)
	}

	_, otherKey, _ := NewCA("demo", time.Now())
	leaf := leafOf(t, ca, "leaf")
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ecDER, _ := x509.MarshalECPrivateKey(ecKey)
	sec1 := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: ecDER})
	tests := []struct {
		name      string
		cert, key []byte
		want      string
	}{
		{"key of another CA", ca.CertPEM, otherKey, "does not belong"},
		{"non-CA certificate with its own key", leaf.CertPEM, leaf.KeyPEM, "not a CA"},
		{"garbage certificate", []byte("garbage"), keyPEM, "CA certificate"},
		{"garbage key", ca.CertPEM, []byte("garbage"), "CA key"},
		{"empty", nil, nil, "CA certificate"},
		{"key PEM given as certificate", keyPEM, keyPEM, "CA certificate"},
		{"certificate PEM given as key", ca.CertPEM, ca.CertPEM, "CA key"},
		{"SEC1 key instead of PKCS#8", ca.CertPEM, sec1, "CA key"},
		{"truncated certificate", ca.CertPEM[:len(ca.CertPEM)/2], keyPEM, "CA certificate"},
		{"corrupt DER", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{0x30, 0x03, 1, 2, 3}}), keyPEM, "CA certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := LoadCA(tt.cert, tt.key)
			if err == nil || got != nil {
				t.Fatalf("LoadCA accepted it: %v", got)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.want)
			}
			if bytes.Contains([]byte(err.Error()), []byte("PRIVATE KEY")) {
				t.Fatal("the error quotes key material")
			}
		})
	}
}

func TestParseKeyPEM(t *testing.T) {
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	der, _ := x509.MarshalPKCS8PrivateKey(edKey)
	s, err := ParseKeyPEM(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	if err != nil || !publicKeysEqual(s.Public(), edKey.Public()) {
		t.Fatalf("Ed25519 PKCS#8: %v", err)
	}
	for _, bad := range [][]byte{nil, []byte("-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("xx")})} {
		if _, err := ParseKeyPEM(bad); err == nil {
			t.Errorf("ParseKeyPEM(%q) accepted", bad)
		}
	}
}

func TestVerifyPinnedChain(t *testing.T) {
	ca, other := newCA(t, "demo"), newCA(t, "demo")
	good := parse(t, leafOf(t, ca, "cp-1").CertPEM)
	foreign := parse(t, leafOf(t, other, "impostor").CertPEM)
	clientOnly := issue(t, ca, func(c *x509.Certificate) { c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth} })
	expired := issue(t, ca, func(c *x509.Certificate) {
		c.NotBefore, c.NotAfter = time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour)
	})
	notYet := issue(t, ca, func(c *x509.Certificate) {
		c.NotBefore, c.NotAfter = time.Now().Add(24*time.Hour), time.Now().Add(48*time.Hour)
	})
	// A non-CA certificate carrying the CA's very key: the pin matches, but it may
	// not issue anything.
	caKeyAsLeaf := selfSigned(t, ca, false)
	// A second certificate for the same CA key (e.g. reissued): same pin, must work.
	reissuedCA := selfSigned(t, ca, true)

	tests := []struct {
		name  string
		chain []*x509.Certificate
		pin   [32]byte
		ok    bool
		// clock: refused as the mesh's chain seen by a clock out of its
		// period (ErrClock), not as another CA's (ErrPinMismatch).
		clock bool
	}{
		{"right chain", []*x509.Certificate{good, ca.Cert}, ca.Pin(), true, false},
		{"right chain, extra certificates", []*x509.Certificate{good, other.Cert, ca.Cert}, ca.Pin(), true, false},
		{"reissued CA certificate, same key", []*x509.Certificate{good, reissuedCA}, ca.Pin(), true, false},
		{"another CA's chain", []*x509.Certificate{foreign, other.Cert}, ca.Pin(), false, false},
		{"pinned CA present, leaf signed by another key", []*x509.Certificate{foreign, ca.Cert}, ca.Pin(), false, false},
		{"pinned CA present, leaf signed by another key, its CA too", []*x509.Certificate{foreign, ca.Cert, other.Cert}, ca.Pin(), false, false},
		{"empty chain", nil, ca.Pin(), false, false},
		{"leaf only", []*x509.Certificate{good}, ca.Pin(), false, false},
		{"the CA alone", []*x509.Certificate{ca.Cert}, ca.Pin(), false, false},
		// Only the holder of the CA key can complete a handshake with the CA
		// certificate as its leaf: that is the mesh, so it is accepted.
		{"CA as its own leaf", []*x509.Certificate{ca.Cert, ca.Cert}, ca.Pin(), true, false},
		{"pin of the leaf", []*x509.Certificate{good, ca.Cert}, PinOf(good), false, false},
		{"zero pin", []*x509.Certificate{good, ca.Cert}, [32]byte{}, false, false},
		{"pinned key on a non-CA certificate", []*x509.Certificate{good, caKeyAsLeaf}, ca.Pin(), false, false},
		{"leaf without server auth", []*x509.Certificate{clientOnly, ca.Cert}, ca.Pin(), false, false},
		{"expired leaf", []*x509.Certificate{expired, ca.Cert}, ca.Pin(), false, false},
		{"leaf not valid yet", []*x509.Certificate{notYet, ca.Cert}, ca.Pin(), false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := VerifyPinnedChain(tt.chain, tt.pin)
			if tt.ok {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if tt.clock {
				if !errors.Is(err, ErrClock) || errors.Is(err, ErrPinMismatch) {
					t.Fatalf("err = %v, want ErrClock only", err)
				}
				return
			}
			if !errors.Is(err, ErrPinMismatch) || errors.Is(err, ErrClock) {
				t.Fatalf("err = %v, want ErrPinMismatch only", err)
			}
		})
	}
}

// issue makes a leaf under ca from a template the caller adjusts.
func issue(t testing.TB, ca *CA, edit func(*x509.Certificate)) *x509.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	edit(tmpl)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// selfSigned makes another self-signed certificate over the CA's key.
func selfSigned(t testing.TB, ca *CA, isCA bool) *x509.Certificate {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               ca.Cert.Subject,
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  isCA,
	}
	if isCA {
		tmpl.KeyUsage |= x509.KeyUsageCertSign
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, ca.Key.Public(), ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCertificateAndConfigsRefuseMismatchedKeys(t *testing.T) {
	ca := newCA(t, "demo")
	a, b := leafOf(t, ca, "a"), leafOf(t, ca, "b")
	mixed := Leaf{CertPEM: a.CertPEM, KeyPEM: b.KeyPEM}
	if _, err := Certificate(mixed, ca.CertPEM); err == nil {
		t.Error("Certificate accepted a key of another leaf")
	}
	if _, err := ServerConfig(mixed, ca.CertPEM); err == nil {
		t.Error("ServerConfig accepted a key of another leaf")
	}
	if _, err := MutualConfig(mixed, ca.CertPEM); err == nil {
		t.Error("MutualConfig accepted a key of another leaf")
	}
	if _, err := MutualConfig(a, []byte("garbage")); err == nil {
		t.Error("MutualConfig accepted a garbage CA")
	}
	cert, err := Certificate(a, ca.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	if len(cert.Certificate) != 2 || !bytes.Equal(cert.Certificate[1], ca.Cert.Raw) {
		t.Fatal("the served chain does not carry the CA after the leaf")
	}
}

// handshake runs a TLS handshake over loopback TCP and returns both sides' errors.
// The server answers with one byte if the handshake succeeded, so a client whose
// certificate the server refused (TLS 1.3 refuses after the client's Finished) sees
// it fail too. (net.Pipe would deadlock: both sides write close_notify at once.)
func handshake(t *testing.T, server, client *tls.Config) (serverErr, clientErr error) {
	t.Helper()
	if client.ServerName == "" && !client.InsecureSkipVerify {
		client = client.Clone()
		client.ServerName = "127.0.0.1" // what a dialler of 127.0.0.1 sets
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		sc, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		_ = sc.SetDeadline(time.Now().Add(5 * time.Second))
		s := tls.Server(sc, server)
		err = s.Handshake()
		if err == nil {
			_, err = s.Write([]byte{1})
		}
		s.Close()
		done <- err
	}()
	cc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	_ = cc.SetDeadline(time.Now().Add(5 * time.Second))
	c := tls.Client(cc, client)
	clientErr = c.Handshake()
	if clientErr == nil {
		var b [1]byte
		_, clientErr = io.ReadFull(c, b[:])
	}
	c.Close()
	return <-done, clientErr
}

func TestMutualConfigHandshake(t *testing.T) {
	ca, other := newCA(t, "demo"), newCA(t, "demo")
	srv, err := MutualConfig(leafOf(t, ca, "cp-1"), ca.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	if srv.ClientAuth != tls.RequireAndVerifyClientCert || srv.ClientCAs == nil || srv.RootCAs == nil || srv.MinVersion != tls.VersionTLS13 {
		t.Fatalf("mutual config: ClientAuth=%v ClientCAs=%v RootCAs=%v Min=%x", srv.ClientAuth, srv.ClientCAs != nil, srv.RootCAs != nil, srv.MinVersion)
	}

	t.Run("good pair", func(t *testing.T) {
		cli, err := MutualConfig(leafOf(t, ca, "cp-2"), ca.CertPEM)
		if err != nil {
			t.Fatal(err)
		}
		if se, ce := handshake(t, srv, cli); se != nil || ce != nil {
			t.Fatalf("server: %v; client: %v", se, ce)
		}
	})
	t.Run("client without a certificate", func(t *testing.T) {
		se, ce := handshake(t, srv, PinnedClientConfig(ca.Pin()))
		if se == nil || ce == nil {
			t.Fatalf("a client without a certificate got in: server %v, client %v", se, ce)
		}
	})
	t.Run("client with a leaf of another CA", func(t *testing.T) {
		// The client trusts the server (it holds the pin); only the server's check of
		// the client can stop it.
		cert, err := Certificate(leafOf(t, other, "intruder"), other.CertPEM)
		if err != nil {
			t.Fatal(err)
		}
		cli := PinnedClientConfig(ca.Pin())
		cli.Certificates = []tls.Certificate{cert}
		se, ce := handshake(t, srv, cli)
		if se == nil || ce == nil {
			t.Fatalf("a client of another CA got in: server %v, client %v", se, ce)
		}
	})
	t.Run("client with another CA's leaf, chain carrying our CA", func(t *testing.T) {
		// Presenting the real CA certificate after a foreign leaf changes nothing.
		cert, err := Certificate(leafOf(t, other, "intruder"), ca.CertPEM)
		if err != nil {
			t.Fatal(err)
		}
		cli := PinnedClientConfig(ca.Pin())
		cli.Certificates = []tls.Certificate{cert}
		if se, _ := handshake(t, srv, cli); se == nil {
			t.Fatal("server accepted a foreign leaf presented with our CA")
		}
	})
	t.Run("server of another CA", func(t *testing.T) {
		impostor, err := MutualConfig(leafOf(t, other, "impostor"), other.CertPEM)
		if err != nil {
			t.Fatal(err)
		}
		cli, _ := MutualConfig(leafOf(t, ca, "cp-2"), ca.CertPEM)
		if _, ce := handshake(t, impostor, cli); ce == nil {
			t.Fatal("client accepted a server of another CA")
		}
	})
}

func TestPinnedClientConfigHandshake(t *testing.T) {
	ca, other := newCA(t, "demo"), newCA(t, "demo")
	srv, err := ServerConfig(leafOf(t, ca, "cp-1"), ca.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	if se, ce := handshake(t, srv, PinnedClientConfig(ca.Pin())); se != nil || ce != nil {
		t.Fatalf("server: %v; client: %v", se, ce)
	}
	impostor, _ := ServerConfig(leafOf(t, other, "cp-1"), other.CertPEM)
	if _, ce := handshake(t, impostor, PinnedClientConfig(ca.Pin())); !errors.Is(ce, ErrPinMismatch) {
		t.Fatalf("impostor: client err = %v, want ErrPinMismatch", ce)
	}
	// A server presenting only its leaf (no CA in the chain) is refused: the client
	// holds the pin, not the CA.
	leaf := leafOf(t, ca, "cp-1")
	bare, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if _, ce := handshake(t, &tls.Config{Certificates: []tls.Certificate{bare}}, PinnedClientConfig(ca.Pin())); !errors.Is(ce, ErrPinMismatch) {
		t.Fatalf("leaf-only server: client err = %v, want ErrPinMismatch", ce)
	}
	// TLS 1.2 is refused.
	old := srv.Clone()
	old.MaxVersion = tls.VersionTLS12
	old.MinVersion = tls.VersionTLS12
	if _, ce := handshake(t, old, PinnedClientConfig(ca.Pin())); ce == nil {
		t.Fatal("client accepted TLS 1.2")
	}
}

// TestVerifyPinnedChainByAWrongClock: the mesh's own chain made by a clock three hours
// ahead of this machine's is ErrClock, never ErrPinMismatch, and names the clocks; a
// leaf of another CA presented beside the pinned one, out of its period alike, stays
// ErrPinMismatch (x509 checks periods before signatures).
func TestVerifyPinnedChainByAWrongClock(t *testing.T) {
	ahead := time.Now().Add(3 * time.Hour)
	parse := func(l Leaf) *x509.Certificate {
		t.Helper()
		c, err := ParseCertificatePEM(l.CertPEM)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ca, _, err := NewCA("clock", ahead)
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := NewCA("other", ahead)
	if err != nil {
		t.Fatal(err)
	}
	ips := []net.IP{net.IPv4(127, 0, 0, 1)}
	mine, err := ca.IssueLeaf("cp-1", ips, ahead)
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := other.IssueLeaf("cp-1", ips, ahead)
	if err != nil {
		t.Fatal(err)
	}

	err = VerifyPinnedChain([]*x509.Certificate{parse(mine), ca.Cert}, ca.Pin())
	if !errors.Is(err, ErrClock) || errors.Is(err, ErrPinMismatch) || !strings.Contains(err.Error(), "this machine's clock is behind, or the mesh's certificates were made by a clock ahead") {
		t.Fatalf("the mesh's chain made by a clock ahead: err = %v, want ErrClock naming both clocks", err)
	}
	err = VerifyPinnedChain([]*x509.Certificate{parse(foreign), ca.Cert}, ca.Pin())
	if !errors.Is(err, ErrPinMismatch) || errors.Is(err, ErrClock) {
		t.Fatalf("another CA's leaf beside the pinned CA, out of its period: err = %v, want ErrPinMismatch only", err)
	}
}
