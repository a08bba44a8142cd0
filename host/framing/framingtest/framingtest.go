// Package framingtest serves tests a broker that passes the pin check and then
// sends what no mesh broker sends.
package framingtest

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/host/framing"
)

// Hostile announcements a broker that passed the pin check may send: sizes nats.go
// would allocate (or overflow on), and a line without end.
var Hostile = map[string]string{
	"overflowing size": "MSG s 1 99999999999999999999\r\n",
	"a terabyte":       "MSG s 1 1099511627776\r\n",
	"endless line":     "MSG s 1 " + strings.Repeat("1", 1<<17),
}

// Broker serves one NATS client over TLS with a leaf of its own CA (returned): INFO,
// PONG to its PING, and hostile once it subscribes.
// It stands for a broker that passes a client's pin check and sends what no mesh
// broker sends.
func Broker(t testing.TB, hostile string) (addr string, ca *x509.Certificate) {
	t.Helper()
	return serve(t, `{"server_id":"S","version":"2.12.0","proto":1,"headers":true,"tls_required":true,"max_payload":2097152,"nonce":"bm9uY2U"}`, hostile)
}

// BrokerSaying is Broker greeting its client with info (the JSON of its INFO line)
// and sending nothing hostile: a broker that passes the pin check and announces what
// it likes.
func BrokerSaying(t testing.TB, info string) (addr string, ca *x509.Certificate) {
	t.Helper()
	return serve(t, info, "")
}

func serve(t testing.TB, info, hostile string) (addr string, ca *x509.Certificate) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	caDER, _ := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	ca, _ = x509.ParseCertificate(caDER)
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
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprint(c, "INFO "+info+"\r\n")
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			switch {
			case strings.HasPrefix(line, "PING"):
				fmt.Fprint(c, "PONG\r\n")
			case strings.HasPrefix(line, "SUB") && hostile != "":
				fmt.Fprint(c, hostile)
				time.Sleep(5 * time.Second)
				return
			}
		}
	}()
	return ln.Addr().String(), ca
}

// ExpectRefused checks that a client connected to Broker (err, nc: what its
// Connect returned; closed: what its closed handler hears, nats.Conn.LastError)
// ends with the guard's refusal: at once, or once it subscribes, after which Broker
// sends its hostile bytes.
func ExpectRefused(t testing.TB, nc *nats.Conn, err error, closed <-chan error) {
	t.Helper()
	if err != nil {
		// Refused during the connect's own reads.
		if !errors.Is(err, framing.ErrHostile) {
			t.Fatalf("connect: %v, want the guard's refusal", err)
		}
		return
	}
	defer nc.Close()
	if _, err := nc.SubscribeSync("s"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-closed:
		if !errors.Is(err, framing.ErrHostile) {
			t.Fatalf("closed with %v, want the guard's refusal", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the connection to the hostile broker is still open")
	}
}
