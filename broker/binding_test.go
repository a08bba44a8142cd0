package broker

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"math/big"
	"net"
	"testing"
	"time"
)

// goldenBoundNonce is BoundNonce("Xk2nonce", 0x00..0x1f). The host agent's test
// (host/link) holds the same vector: the two definitions of the binding must agree
// byte for byte, or no agent logs in.
const goldenBoundNonce = "6d65736820626f756e64206e6f6e636520763100000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f586b326e6f6e6365"

func TestBoundNonceGolden(t *testing.T) {
	binding := make([]byte, BindingSize)
	for i := range binding {
		binding[i] = byte(i)
	}
	if got := hex.EncodeToString(BoundNonce([]byte("Xk2nonce"), binding)); got != goldenBoundNonce {
		t.Fatalf("BoundNonce = %s, want %s", got, goldenBoundNonce)
	}
	if BindingLabel != "EXPORTER-mesh-channel-binding" || BindingSize != 32 {
		t.Fatalf("binding label %q size %d changed: hosts would bind to another value", BindingLabel, BindingSize)
	}
}

// TestBoundDialerSignsWhatTheServerChecks: the message a BoundDialer's client signs
// is the one the server rebuilds from its own end of the session, and a session made
// by another dialer exports another value.
func TestBoundDialerSignsWhatTheServerChecks(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "broker"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	server := make(chan []byte, 2)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := c.(*tls.Conn)
			if err := tc.Handshake(); err != nil {
				server <- nil
				continue
			}
			cs := tc.ConnectionState()
			server <- ChannelBinding(&cs)
			defer c.Close()
		}
	}()
	nonce := []byte("server-nonce")
	signed := func(d *BoundDialer) []byte {
		t.Helper()
		c, err := d.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var msg []byte
		if _, err := d.Sign(func(m []byte) ([]byte, error) { msg = m; return nil, nil })(nonce); err != nil {
			t.Fatal(err)
		}
		b := <-server
		if want := BoundNonce(nonce, b); len(b) != BindingSize || string(msg) != string(want) {
			t.Fatalf("client signed %x; the server checks %x", msg, want)
		}
		return msg
	}
	cfg := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the test's own server
	if string(signed(&BoundDialer{TLS: cfg})) == string(signed(&BoundDialer{TLS: cfg})) {
		t.Fatal("two sessions export the same binding")
	}
	if _, err := (&BoundDialer{TLS: cfg}).Sign(func(m []byte) ([]byte, error) { return m, nil })(nonce); err == nil {
		t.Fatal("a dialer that made no session signed the nonce")
	}
	if ChannelBinding(nil) != nil {
		t.Fatal("no TLS, yet a binding")
	}
}
