package link

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/host/pintls"
)

// TestSubstitutedIsAnError: a broker whose chain does not reach the pin fails the
// connection with an error errors.Is recognises, without matching its text.
func TestSubstitutedIsAnError(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "impostor"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}})
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
			go func() { c.(*tls.Conn).Handshake(); c.Close() }()
		}
	}()
	var pin [32]byte // pins nothing the impostor has
	_, err = nats.Connect(URLs([]string{ln.Addr().String()}), append(Pinned(pin), nats.Timeout(2*time.Second), nats.NoReconnect())...)
	if !IsSubstituted(err) {
		t.Fatalf("connect to an impostor: %v; want an error matching pintls.ErrSubstituted", err)
	}
	if IsAuthRefused(err) {
		t.Fatal("a substituted broker reads as an authorization refusal")
	}
	_ = pintls.ErrSubstituted
}
