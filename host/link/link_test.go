package link

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
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
	sign := func([]byte) ([]byte, error) { t.Error("the node key signed for an impostor"); return nil, nil }
	_, err = nats.Connect(URLs([]string{ln.Addr().String()}), append(Login{Pin: pin, PublicKey: "UNODE", Sign: sign}.Options(), nats.Timeout(2*time.Second), nats.NoReconnect())...)
	if !IsSubstituted(err) {
		t.Fatalf("connect to an impostor: %v; want an error matching pintls.ErrSubstituted", err)
	}
	if IsAuthRefused(err) {
		t.Fatal("a substituted broker reads as an authorization refusal")
	}
	// The pin check tells a watcher too: a reconnection's refusal reaches nobody else.
	var told []error
	_, err = nats.Connect(URLs([]string{ln.Addr().String()}), append(Login{Pin: pin, PublicKey: "UNODE", Sign: sign, Refused: func(err error) { told = append(told, err) }}.Options(), nats.Timeout(2*time.Second), nats.NoReconnect())...)
	if !IsSubstituted(err) || len(told) != 1 || !IsSubstituted(told[0]) {
		t.Fatalf("connect with a watcher: %v; the watcher heard %v, want one error matching pintls.ErrSubstituted", err, told)
	}
	// Naming the address it dialled: "check what listens there" needs it (a
	// walkthrough: the agent's log had none).
	var be *BrokerError
	if !errors.As(told[0], &be) || be.Broker != ln.Addr().String() {
		t.Fatalf("the watcher heard %v, want the broker %s named", told[0], ln.Addr())
	}
	_ = pintls.ErrSubstituted
}

// TestLivenessOptions: the options a running agent connects with ping at
// PingInterval (or the interval asked for), give up after MaxPingsOutstanding, and
// dial with Dialer's settings under the TLS session.
func TestLivenessOptions(t *testing.T) {
	options := func(ping time.Duration) nats.Options {
		o := nats.GetDefaultOptions()
		for _, opt := range Liveness(ping) {
			if err := opt(&o); err != nil {
				t.Fatal(err)
			}
		}
		return o
	}
	if o := options(3 * time.Second); o.PingInterval != 3*time.Second || o.MaxPingsOut != MaxPingsOutstanding {
		t.Errorf("asked for pings every 3s: every %s, %d outstanding", o.PingInterval, o.MaxPingsOut)
	}
	o := options(0)
	for _, opt := range (Login{PublicKey: "UNODE"}).Options() {
		if err := opt(&o); err != nil {
			t.Fatal(err)
		}
	}
	if o.PingInterval != PingInterval || o.MaxPingsOut != MaxPingsOutstanding {
		t.Errorf("pings every %s, %d outstanding; want %s and %d", o.PingInterval, o.MaxPingsOut, PingInterval, MaxPingsOutstanding)
	}
	bd, ok := o.CustomDialer.(*boundDialer)
	if !ok {
		t.Fatalf("dialer is %T, want *boundDialer", o.CustomDialer)
	}
	d := bd.tcp
	if !d.KeepAliveConfig.Enable || d.KeepAliveConfig.Idle != KeepAliveIdle || d.KeepAliveConfig.Interval != KeepAliveInterval ||
		d.KeepAliveConfig.Count != KeepAliveCount || d.Timeout != DialTimeout || d.Control == nil {
		t.Errorf("dialer %+v does not carry the liveness settings", d)
	}
	// The kernel notices a cut link before the pings would: that is their split.
	// On Linux the kernel gives up at the first probe after UserTimeout of silence.
	byKernel := max(KeepAliveIdle+KeepAliveCount*KeepAliveInterval, UserTimeout+KeepAliveInterval)
	if byPings := PingInterval * MaxPingsOutstanding; byKernel >= byPings {
		t.Errorf("keepalive gives up after %s, pings after %s: the cheaper layer must be the faster", byKernel, byPings)
	}
}
