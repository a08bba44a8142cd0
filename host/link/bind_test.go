package link

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// goldenBoundNonce is BoundNonce("Xk2nonce", 0x00..0x1f). The control plane's test
// (broker) holds the same vector: the two definitions of the binding must agree
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
		t.Fatalf("binding label %q size %d changed: the mesh would check another value", BindingLabel, BindingSize)
	}
}

// TestLoginSignsTheNonceBoundToItsSession: the node key signs the nonce bound to the
// session the dialer made with the (pinned) broker, the value the broker exports at
// its end; each session exports its own.
func TestLoginSignsTheNonceBoundToItsSession(t *testing.T) {
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	caDER, _ := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "broker"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{{Certificate: [][]byte{der, caDER}, PrivateKey: key}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	exported := make(chan []byte, 2)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := c.(*tls.Conn)
			if tc.Handshake() != nil {
				exported <- nil
				continue
			}
			cs := tc.ConnectionState()
			b, _ := cs.ExportKeyingMaterial(BindingLabel, nil, BindingSize)
			exported <- b
		}
	}()
	nonce := []byte("server-nonce")
	var signed []string
	for range 2 {
		var msg []byte
		o := nats.GetDefaultOptions()
		for _, opt := range (Login{Pin: sha256.Sum256(ca.RawSubjectPublicKeyInfo), PublicKey: "UNODE", Sign: func(m []byte) ([]byte, error) { msg = m; return nil, nil }}).Options() {
			if err := opt(&o); err != nil {
				t.Fatal(err)
			}
		}
		c, err := o.CustomDialer.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := o.SignatureCB(nonce); err != nil {
			t.Fatal(err)
		}
		b := <-exported
		if want := BoundNonce(nonce, b); len(b) != BindingSize || string(msg) != string(want) {
			t.Fatalf("the node key signed %x; the broker checks %x", msg, want)
		}
		signed = append(signed, string(msg))
	}
	if signed[0] == signed[1] {
		t.Fatal("two sessions export the same binding")
	}
}

// TestStalledHandshakeSaysWhere: a broker address whose TCP connection opens and
// whose TLS handshake never completes (a path-MTU black hole drops the certificates;
// a broker too busy to answer) fails within the dial's timeout, with an error that
// says the connection opened and what stalls, and still matches
// context.DeadlineExceeded.
func TestStalledHandshakeSaysWhere(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // accepted, never answered
		}
	}()
	o := nats.GetDefaultOptions()
	for _, opt := range (Login{PublicKey: "UNODE", Timeout: 300 * time.Millisecond}).Options() {
		if err := opt(&o); err != nil {
			t.Fatal(err)
		}
	}
	began := time.Now()
	_, err = o.CustomDialer.Dial("tcp", ln.Addr().String())
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "MTU") {
		t.Fatalf("dial a broker that never answers the handshake: %v; want a deadline that names the MTU", err)
	}
	if took := time.Since(began); took > 3*time.Second {
		t.Fatalf("took %s with a 300ms timeout", took)
	}
}
