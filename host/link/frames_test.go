package link

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
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
)

// A stream a mesh broker could send: INFO, PING, messages with and without reply
// and headers, payloads that hold what looks like protocol, one of MaxMessage.
func legitimateStream() string {
	big := strings.Repeat("x", MaxMessage)
	return `INFO {"server_id":"S","max_payload":2097152,"connect_urls":["127.0.0.1:7300"]}` + "\r\n" +
		"PING\r\n+OK\r\nPONG\r\n" +
		"MSG mesh.node.web-1.decl 1 5\r\nhello\r\n" +
		"msg mesh.node.web-1.decl 1 _INBOX.x 27\r\nMSG a 1 99999999999999\r\n\n\r\n\r\n" +
		"HMSG mesh.node.web-1.decl 2 22 27\r\nNATS/1.0\r\nA: b\r\n\r\nhello\r\n" +
		"HMSG\tmesh.node.web-1.decl\t2\t_INBOX.y\t12\t12\r\nNATS/1.0\r\n\r\n\r\n" +
		"MSG mesh.node.web-1.decl 1 0\r\n\r\n" +
		"MSG mesh.node.web-1.decl 1 " + fmt.Sprint(len(big)) + "\r\n" + big + "\r\n" +
		"-ERR 'Permissions Violation for Publish to \"x\"'\r\n"
}

// TestFramingPassesWhatAMeshBrokerSends: every split of a legitimate stream into two
// reads (and one byte at a time) passes, whatever a payload holds.
func TestFramingPassesWhatAMeshBrokerSends(t *testing.T) {
	s := []byte(legitimateStream())
	for _, cut := range []int{0, 1, 5, 40, 90, 100, 101, 120, 160, 200, 260, 300, len(s) - 60, len(s) - 2, len(s)} {
		var f framing
		if err := f.feed(s[:cut]); err != nil {
			t.Fatalf("cut at %d, first part: %v", cut, err)
		}
		if err := f.feed(s[cut:]); err != nil {
			t.Fatalf("cut at %d, second part: %v", cut, err)
		}
		if f.skip != 0 || len(f.line) != 0 {
			t.Fatalf("cut at %d: the stream ended mid-frame by the guard's reading (skip %d, line %q)", cut, f.skip, f.line)
		}
	}
	small := s[:len(s)-MaxMessage-200]
	var f framing
	for i := range small {
		if err := f.feed(small[i : i+1]); err != nil {
			t.Fatalf("byte %d, one at a time: %v", i, err)
		}
	}
}

// TestFramingRefusesWhatNoMeshBrokerSends: a size past MaxMessage (or past what an
// int holds, which panics nats.go's read loop), a size that is no number, a line
// without end; refused at the first read that shows it, and every read after.
func TestFramingRefusesWhatNoMeshBrokerSends(t *testing.T) {
	for name, in := range map[string]string{
		"one byte too many":    "MSG a 1 " + fmt.Sprint(MaxMessage+1) + "\r\n",
		"overflowing size":     "MSG a 1 99999999999999999999\r\n",
		"a terabyte":           "MSG a 1 _INBOX.r 1099511627776\r\n",
		"headers, huge total":  "HMSG a 1 10 9223372036854775807\r\n",
		"lower case":           "msg a 1 9999999999\r\n",
		"not a number":         "MSG a 1 -5\r\n",
		"no size":              "MSG a\r\n",
		"endless line":         "INFO {" + strings.Repeat("a", MaxControlLine+1),
		"endless line, ended":  "-ERR " + strings.Repeat("a", MaxControlLine+1) + "\r\n",
		"after a good message": "MSG a 1 2\r\nok\r\nMSG a 1 99999999999\r\n",
	} {
		var f framing
		err := f.feed([]byte(in))
		if !errors.Is(err, ErrHostileFraming) {
			t.Errorf("%s: %v, want ErrHostileFraming", name, err)
		}
		if err := f.feed([]byte("PING\r\n")); !errors.Is(err, ErrHostileFraming) && f.err == nil {
			t.Errorf("%s: the guard forgot its refusal", name)
		}
	}
	// An endless line arriving in small reads is refused as soon as it is too long,
	// not kept.
	var f framing
	chunk := []byte(strings.Repeat("a", 1000))
	var err error
	for i := 0; err == nil && i < 1000; i++ {
		err = f.feed(chunk)
	}
	if !errors.Is(err, ErrHostileFraming) || len(f.line) != 0 {
		t.Fatalf("an endless line in reads of 1000 bytes: %v, %d bytes kept", err, len(f.line))
	}
}

// FuzzFraming: no input panics the guard or makes it keep more than a line's worth;
// whatever it lets through announces no message larger than MaxMessage.
func FuzzFraming(f *testing.F) {
	f.Add([]byte(legitimateStream()[:300]), 7)
	f.Add([]byte("MSG a 1 99999999999999999999\r\n"), 3)
	f.Add([]byte("HMSG a 1 2 3\r\nabc\r\nMSG"), 1)
	f.Fuzz(func(t *testing.T, in []byte, cut int) {
		var g framing
		if cut < 0 {
			cut = -cut
		}
		if len(in) > 0 {
			cut %= len(in) + 1
		} else {
			cut = 0
		}
		err := g.feed(in[:cut])
		if err == nil {
			err = g.feed(in[cut:])
		}
		if err != nil && !errors.Is(err, ErrHostileFraming) {
			t.Fatalf("an error that is not the guard's: %v", err)
		}
		if len(g.line) > MaxControlLine || g.skip > MaxMessage+2 {
			t.Fatalf("the guard keeps %d bytes of a line, skips %d", len(g.line), g.skip)
		}
	})
}

// TestHostileBrokerCannotCrashTheConnection: a broker whose leaf chains to the
// pinned CA (a removed control node on the path, say) answers the login and then
// announces a message of 99999999999999999999 bytes. nats.go would have sized a
// buffer by it and panicked in its read loop, taking the agent down at every
// restart; the connection is closed instead, and the client lives on.
func TestHostileBrokerCannotCrashTheConnection(t *testing.T) {
	for name, hostile := range map[string]string{
		"overflowing size": "MSG mesh.node.web-1.decl 1 99999999999999999999\r\n",
		"a terabyte":       "MSG mesh.node.web-1.decl 1 1099511627776\r\n",
		"endless line":     "MSG mesh.node.web-1.decl 1 " + strings.Repeat("1", 2*MaxControlLine),
	} {
		t.Run(name, func(t *testing.T) {
			addr, pin := hostileBroker(t, hostile)
			o := nats.GetDefaultOptions()
			o.Url = "tls://" + addr
			o.AllowReconnect = false
			closed := make(chan error, 1)
			o.ClosedCB = func(nc *nats.Conn) { closed <- nc.LastError() }
			for _, opt := range (Login{Pin: pin, PublicKey: "UNODE", Sign: func([]byte) ([]byte, error) { return []byte("sig"), nil }}).Options() {
				if err := opt(&o); err != nil {
					t.Fatal(err)
				}
			}
			nc, err := o.Connect()
			if err != nil {
				// Refused during the connect's own reads: the guard's error ends it.
				if !errors.Is(err, ErrHostileFraming) && !strings.Contains(err.Error(), ErrHostileFraming.Error()) {
					t.Fatalf("connect: %v, want the guard's refusal", err)
				}
				return
			}
			defer nc.Close()
			if _, err := nc.SubscribeSync("mesh.node.web-1.decl"); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-closed:
				if err == nil || !strings.Contains(err.Error(), ErrHostileFraming.Error()) {
					t.Fatalf("closed with %v, want the guard's refusal", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the connection to the hostile broker is still open")
			}
		})
	}
}

// hostileBroker serves one NATS client over TLS with a leaf of its own CA (returned
// as the pin): INFO, +OK and PONG to its CONNECT and PING, then hostile.
func hostileBroker(t *testing.T, hostile string) (string, [32]byte) {
	t.Helper()
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
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprint(c, `INFO {"server_id":"S","version":"2.12.0","proto":1,"headers":true,"tls_required":true,"max_payload":2097152,"nonce":"bm9uY2U"}`+"\r\n")
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			switch {
			case strings.HasPrefix(line, "PING"):
				fmt.Fprint(c, "PONG\r\n")
			case strings.HasPrefix(line, "SUB"):
				fmt.Fprint(c, hostile)
				time.Sleep(5 * time.Second)
				return
			}
		}
	}()
	return ln.Addr().String(), sha256.Sum256(ca.RawSubjectPublicKeyInfo)
}

// BenchmarkFraming: what the guard adds to reading one declaration (its MSG line and
// an envelope-sized payload).
func BenchmarkFraming(b *testing.B) {
	msg := []byte("MSG mesh.node.web-1.decl 1 1500\r\n" + strings.Repeat("x", 1500) + "\r\n")
	b.ReportAllocs()
	var f framing
	for b.Loop() {
		if err := f.feed(msg); err != nil {
			b.Fatal(err)
		}
	}
}
