package pintls

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The host may not import the control plane, so these tests make their own
// certificates the way the mesh does: an ECDSA CA, leaves for server and client auth.

type authority struct {
	cert *x509.Certificate
	key  crypto.Signer
}

func newAuthority(t testing.TB) authority {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "mesh CA test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	return authority{cert: create(t, tmpl, tmpl, key.Public(), key), key: key}
}

type leaf struct {
	cert *x509.Certificate
	key  crypto.Signer
}

func (a authority) issue(t testing.TB, edit func(*x509.Certificate)) leaf {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "control cp-1"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	if edit != nil {
		edit(tmpl)
	}
	return leaf{cert: create(t, tmpl, a.cert, key.Public(), a.key), key: key}
}

func create(t testing.TB, tmpl, parent *x509.Certificate, pub crypto.PublicKey, signer crypto.Signer) *x509.Certificate {
	t.Helper()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	return n
}

func TestPin(t *testing.T) {
	a := newAuthority(t)
	if Pin(a.cert) != sha256.Sum256(a.cert.RawSubjectPublicKeyInfo) {
		t.Fatal("Pin is not the SHA-256 of the SubjectPublicKeyInfo")
	}
	if Pin(a.cert) == sha256.Sum256(a.cert.Raw) {
		t.Fatal("Pin hashes the whole certificate")
	}
}

func TestVerify(t *testing.T) {
	ca, other := newAuthority(t), newAuthority(t)
	good := ca.issue(t, nil).cert
	foreign := other.issue(t, nil).cert
	clientOnly := ca.issue(t, func(c *x509.Certificate) { c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth} }).cert
	expired := ca.issue(t, func(c *x509.Certificate) {
		c.NotBefore, c.NotAfter = time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour)
	}).cert
	// A non-CA certificate over the CA's own key: its pin matches, but it cannot issue.
	notCA := create(t, &x509.Certificate{
		SerialNumber: serial(), Subject: ca.cert.Subject,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		BasicConstraintsValid: true, IsCA: false,
	}, ca.cert, ca.key.Public(), ca.key)
	// A leaf issued by a leaf of the mesh.
	l := ca.issue(t, nil)
	byLeaf := authority{cert: l.cert, key: l.key}.issue(t, nil).cert

	tests := []struct {
		name  string
		chain []*x509.Certificate
		pin   [32]byte
		ok    bool
	}{
		{"right chain", []*x509.Certificate{good, ca.cert}, Pin(ca.cert), true},
		{"right chain with extra certificates", []*x509.Certificate{good, other.cert, ca.cert}, Pin(ca.cert), true},
		{"another CA's chain", []*x509.Certificate{foreign, other.cert}, Pin(ca.cert), false},
		{"pinned CA present, leaf signed by another key", []*x509.Certificate{foreign, ca.cert}, Pin(ca.cert), false},
		{"pinned CA present, leaf signed by another key, its CA too", []*x509.Certificate{foreign, ca.cert, other.cert}, Pin(ca.cert), false},
		{"empty chain", nil, Pin(ca.cert), false},
		{"empty non-nil chain", []*x509.Certificate{}, Pin(ca.cert), false},
		{"leaf only", []*x509.Certificate{good}, Pin(ca.cert), false},
		{"CA alone", []*x509.Certificate{ca.cert}, Pin(ca.cert), false},
		{"pin of the leaf", []*x509.Certificate{good, ca.cert}, Pin(good), false},
		{"zero pin", []*x509.Certificate{good, ca.cert}, [32]byte{}, false},
		{"pinned key on a non-CA certificate", []*x509.Certificate{good, notCA}, Pin(ca.cert), false},
		{"leaf issued by a leaf", []*x509.Certificate{byLeaf, l.cert, ca.cert}, Pin(ca.cert), false},
		{"leaf without server auth", []*x509.Certificate{clientOnly, ca.cert}, Pin(ca.cert), false},
		{"expired leaf", []*x509.Certificate{expired, ca.cert}, Pin(ca.cert), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Verify(tt.chain, tt.pin, time.Now())
			if tt.ok {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrSubstituted) {
				t.Fatalf("err = %v, want ErrSubstituted", err)
			}
		})
	}
}

// dial runs a real TLS handshake against a loopback server presenting chain, with the
// pinned client configuration, and reports the client's error and whether the server
// received any application byte.
func dial(t *testing.T, chain []*x509.Certificate, key crypto.Signer, pin [32]byte) (serverGotBytes int, clientErr error) {
	t.Helper()
	var raw [][]byte
	for _, c := range chain {
		raw = append(raw, c.Raw)
	}
	srvCfg := &tls.Config{Certificates: []tls.Certificate{{Certificate: raw, PrivateKey: key}}, MinVersion: tls.VersionTLS12}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srvCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan int, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- 0
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		b, _ := io.ReadAll(c)
		got <- len(b)
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), Config(pin, nil))
	if err == nil {
		_, err = c.Write([]byte("CONNECT {}\r\n"))
		c.Close()
	}
	return <-got, err
}

func TestConfigHandshake(t *testing.T) {
	ca, other := newAuthority(t), newAuthority(t)
	good := ca.issue(t, nil)
	imp := other.issue(t, nil)

	if n, err := dial(t, []*x509.Certificate{good.cert, ca.cert}, good.key, Pin(ca.cert)); err != nil || n == 0 {
		t.Fatalf("mesh server: err = %v, server received %d bytes", err, n)
	}
	cases := []struct {
		name  string
		chain []*x509.Certificate
		key   crypto.Signer
	}{
		{"impostor of another CA", []*x509.Certificate{imp.cert, other.cert}, imp.key},
		{"impostor presenting our CA after its leaf", []*x509.Certificate{imp.cert, ca.cert}, imp.key},
		{"our leaf without the CA", []*x509.Certificate{good.cert}, good.key},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			n, err := dial(t, tt.chain, tt.key, Pin(ca.cert))
			if !errors.Is(err, ErrSubstituted) {
				t.Fatalf("err = %v, want ErrSubstituted", err)
			}
			if n != 0 {
				t.Fatalf("the impostor received %d application bytes", n)
			}
		})
	}
}

func TestConfigRefusesOldTLS(t *testing.T) {
	cfg := Config([32]byte{1}, nil)
	if cfg.MinVersion != tls.VersionTLS13 {
		t.Fatalf("MinVersion = %x, want TLS 1.3", cfg.MinVersion)
	}
	if cfg.VerifyConnection == nil {
		t.Fatal("no VerifyConnection: the pin is not checked on resumed sessions")
	}
	if cfg.VerifyPeerCertificate != nil {
		t.Fatal("VerifyPeerCertificate is skipped on resumed sessions; use VerifyConnection")
	}
}

func TestVerifyEd25519Chain(t *testing.T) {
	// The pin check does not care which signature algorithm the mesh chose.
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "ed CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	ca := authority{cert: create(t, tmpl, tmpl, pub, priv), key: priv}
	l := ca.issue(t, nil)
	if err := Verify([]*x509.Certificate{l.cert, ca.cert}, Pin(ca.cert), time.Now()); err != nil {
		t.Fatal(err)
	}
}

// TestPinCheckedOnResumedSession: a session resumed from a client session cache is
// checked against the pin too, with the chain of the handshake that made it. The
// server presents CA A's chain first, then CA B's, with the same ticket keys: a client
// pinned to B that holds A's session must refuse it although a full handshake would
// pass, and its next attempt, the session dropped, makes a full handshake that does.
func TestPinCheckedOnResumedSession(t *testing.T) {
	a, b := newAuthority(t), newAuthority(t)
	leafA, leafB := a.issue(t, nil), b.issue(t, nil)
	chainOf := func(l leaf, ca *x509.Certificate) *tls.Certificate {
		return &tls.Certificate{Certificate: [][]byte{l.cert.Raw, ca.Raw}, PrivateKey: l.key}
	}
	var presentB atomic.Bool
	srvCfg := &tls.Config{MinVersion: tls.VersionTLS13, GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		if presentB.Load() {
			return chainOf(leafB, b.cert), nil
		}
		return chainOf(leafA, a.cert), nil
	}}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srvCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	received := make(chan int, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(2 * time.Second))
				if _, err := c.Write([]byte("INFO {}\r\n")); err != nil {
					received <- 0
					return
				}
				got, _ := io.ReadAll(c)
				received <- len(got)
			}()
		}
	}()
	sessions := tls.NewLRUClientSessionCache(4)
	connect := func(pin [32]byte) (resumed bool, err error) {
		t.Helper()
		cfg := Config(pin, nil)
		cfg.ClientSessionCache = sessions
		c, err := tls.Dial("tcp", ln.Addr().String(), cfg)
		if err != nil {
			<-received
			return false, err
		}
		// Reading the server's first line takes in the session ticket sent before it.
		if _, err := c.Read(make([]byte, 16)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte("CONNECT {}\r\n")); err != nil {
			t.Fatal(err)
		}
		resumed = c.ConnectionState().DidResume
		c.Close()
		if n := <-received; n == 0 {
			t.Fatal("the server received nothing from a connection the client completed")
		}
		return resumed, nil
	}
	if resumed, err := connect(Pin(a.cert)); err != nil || resumed {
		t.Fatalf("first connection: resumed %v, err %v; want a full handshake", resumed, err)
	}
	if resumed, err := connect(Pin(a.cert)); err != nil || !resumed {
		t.Fatalf("second connection: resumed %v, err %v; want the session resumed", resumed, err)
	}
	presentB.Store(true)
	if _, err := connect(Pin(b.cert)); !errors.Is(err, ErrSubstituted) {
		t.Fatalf("a session made with CA A's chain, resumed by a client pinned to CA B: err %v, want ErrSubstituted", err)
	}
	if resumed, err := connect(Pin(b.cert)); err != nil || resumed {
		t.Fatalf("after the refusal: resumed %v, err %v; want a full handshake with CA B's chain", resumed, err)
	}
}

// TestVerifyByAWrongClock: the mesh's own chain seen by a clock outside its validity
// is ErrClock, never ErrSubstituted, and says which clock to fix; anything that does
// not chain to the pinned CA stays ErrSubstituted whatever the clock says, a forged
// leaf out of its period included (x509 checks periods before signatures).
func TestVerifyByAWrongClock(t *testing.T) {
	ca, other := newAuthority(t), newAuthority(t)
	good := ca.issue(t, nil).cert
	foreign := other.issue(t, nil).cert
	expired := ca.issue(t, func(c *x509.Certificate) {
		c.NotBefore, c.NotAfter = time.Now().Add(-30*time.Minute), time.Now().Add(-time.Minute)
	}).cert
	yearAgo, now := time.Now().AddDate(-1, 0, 0), time.Now()

	for _, tt := range []struct {
		name  string
		chain []*x509.Certificate
		at    time.Time
		clock string // "" when ErrSubstituted is wanted
	}{
		{"the mesh's chain, clock a year behind", []*x509.Certificate{good, ca.cert}, yearAgo, "before the mesh's certificates are valid"},
		{"the mesh's chain, clock a year ahead", []*x509.Certificate{good, ca.cert}, now.AddDate(1, 0, 0), "after the broker's certificate expired"},
		{"the mesh's leaf, expired", []*x509.Certificate{expired, ca.cert}, now, "after the broker's certificate expired"},
		{"another CA's chain, clock a year behind", []*x509.Certificate{foreign, other.cert}, yearAgo, ""},
		{"pinned CA present, leaf signed by another key, clock a year behind", []*x509.Certificate{foreign, ca.cert}, yearAgo, ""},
		{"pinned CA present, leaf signed by another key, clock a year ahead", []*x509.Certificate{foreign, ca.cert}, now.AddDate(1, 0, 0), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := Verify(tt.chain, Pin(ca.cert), tt.at)
			if tt.clock == "" {
				if !errors.Is(err, ErrSubstituted) || errors.Is(err, ErrClock) {
					t.Fatalf("err = %v, want ErrSubstituted only", err)
				}
				return
			}
			if !errors.Is(err, ErrClock) || errors.Is(err, ErrSubstituted) {
				t.Fatalf("err = %v, want ErrClock only", err)
			}
			if !strings.Contains(err.Error(), tt.clock) || !strings.Contains(err.Error(), "this machine's clock") {
				t.Fatalf("err = %q, want it to say %q and name this machine's clock", err, tt.clock)
			}
			// An expired certificate is renewed, never joined again (a walkthrough:
			// the agent sent operators to the most destructive fix).
			if strings.Contains(err.Error(), "expired") && (!strings.Contains(err.Error(), "renew-certificate") || strings.Contains(err.Error(), "joined again")) {
				t.Fatalf("err = %q, want the renewal as the way out", err)
			}
		})
	}
}
