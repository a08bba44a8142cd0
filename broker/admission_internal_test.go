package broker

import (
	"crypto/tls"
	"errors"
	"net"
	"testing"
	"time"

	"mesh/controlplane/pki"
)

// testLeaf is a mesh CA and its control node's leaf for 127.0.0.1, with the server
// configuration of that leaf; the external tests reach it as NewTestLeaf.
func testLeaf(t testing.TB) (*pki.CA, pki.Leaf, *tls.Config) {
	t.Helper()
	ca, _, err := pki.NewCA("test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.IssueLeaf("control cp-1", []net.IP{net.IPv4(127, 0, 0, 1)}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pki.ServerConfig(leaf, ca.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	return ca, leaf, cfg
}

// NewTestLeaf is testLeaf for the external tests (package broker_test).
var NewTestLeaf = testLeaf

func serverConfig(t *testing.T) (*tls.Config, [32]byte) {
	t.Helper()
	ca, _, cfg := testLeaf(t)
	return cfg, ca.Pin()
}

// handshake runs one TLS handshake between a client offering protos and a server of
// cfg, over an in-memory pipe, and returns the server's error.
func handshake(t *testing.T, cfg *tls.Config, pin [32]byte, protos ...string) error {
	t.Helper()
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	client := pki.PinnedClientConfig(pin)
	client.NextProtos = protos
	done := make(chan error, 1)
	go func() {
		err := tls.Client(c, client).Handshake()
		if err != nil {
			c.Close()
		}
		done <- err
	}()
	err := tls.Server(s, cfg).Handshake()
	if err != nil {
		s.Close()
	}
	<-done
	return err
}

// An operator's handshake is not held; a host's is refused once it waited MaxWait,
// and goes ahead once the broker opens.
func TestOperatorsAreNotHeld(t *testing.T) {
	cfg, pin := serverConfig(t)
	a := newAdmission(Admission{Held: true, MaxWait: 100 * time.Millisecond})
	server := a.serverTLS(cfg)
	if err := handshake(t, server, pin, OperatorProtocol); err != nil {
		t.Fatalf("operator: %v", err)
	}
	start := time.Now()
	if err := handshake(t, server, pin, "h2"); !errors.Is(err, ErrBusy) {
		t.Fatalf("host: err = %v, want ErrBusy", err)
	}
	if took := time.Since(start); took < 100*time.Millisecond {
		t.Fatalf("refused after %s, before MaxWait", took)
	}
	if s := a.stats(); s.Operators != 1 || s.Held != 1 || s.Refused != 1 || s.Waiting != 0 {
		t.Fatalf("stats %+v", s)
	}
	a.Open()
	a.Open() // a second Open does nothing
	if err := handshake(t, server, pin); err != nil {
		t.Fatalf("host after Open: %v", err)
	}
	if s := a.stats(); s.Held != 1 || s.Released != 0 {
		t.Fatalf("an open broker held a handshake: %+v", s)
	}
}

// Handshakes held when the broker opens all go ahead.
func TestOpenReleasesEveryHeldHandshake(t *testing.T) {
	cfg, pin := serverConfig(t)
	a := newAdmission(Admission{Held: true, MaxWait: time.Minute})
	server := a.serverTLS(cfg)
	const n = 5
	errs := make(chan error, n)
	for range n {
		go func() { errs <- handshake(t, server, pin) }()
	}
	deadline := time.Now().Add(10 * time.Second)
	for a.stats().Waiting != n {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v, want %d waiting", a.stats(), n)
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-errs:
		t.Fatalf("a held handshake ended before Open: %v", err)
	default:
	}
	a.Open()
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if s := a.stats(); s.Held != n || s.Released != n || s.Refused != 0 || s.Waiting != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestUnheldAdmissionIsOpen(t *testing.T) {
	a := newAdmission(Admission{})
	if err := a.admit(); err != nil {
		t.Fatal(err)
	}
	if a.maxWait != DefaultHandshakeWait {
		t.Fatalf("maxWait = %s", a.maxWait)
	}
	if s := a.stats(); s != (AdmissionStats{}) {
		t.Fatalf("stats %+v", s)
	}
}
