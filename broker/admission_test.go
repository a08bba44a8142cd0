package broker_test

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/broker"
	"mesh/controlplane/pki"
)

// A broker started held lets an operator in at once, keeps hosts waiting without
// asking the authenticator about them, and lets them in on Open.
func TestHeldBrokerAdmitsHostsOnOpen(t *testing.T) {
	m := newMesh(t)
	auth := byToken(map[string]broker.Grant{
		"host": everything("host", broker.AccountHosts),
		"op":   everything("op", broker.AccountOperators),
	})
	s, _ := startWith(t, m, auth, func(c *broker.Config) {
		c.Admission = broker.Admission{Held: true, MaxWait: 10 * time.Second}
	})
	pin := m.ca.Pin()

	hostUp := make(chan error, 1)
	go func() {
		_, err := dial(t, s, pin, nats.Token("host"), nats.Timeout(10*time.Second))
		hostUp <- err
	}()
	operator := pki.PinnedClientConfig(pin)
	operator.NextProtos = []string{broker.OperatorProtocol}
	if _, err := dial(t, s, pin, nats.Token("op"), nats.Secure(operator)); err != nil {
		t.Fatalf("operator while hosts are held: %v", err)
	}
	waitFor(t, func() bool { return s.AdmissionStats().Waiting == 1 })
	select {
	case err := <-hostUp:
		t.Fatalf("a host connected to a held broker (err %v)", err)
	case <-time.After(200 * time.Millisecond):
	}
	for _, c := range auth.calls() {
		if c.Token == "host" {
			t.Fatal("the authenticator was asked about a held host")
		}
	}
	s.Open()
	if err := <-hostUp; err != nil {
		t.Fatalf("host after Open: %v", err)
	}
	st := s.AdmissionStats()
	if st.Operators != 1 || st.Held != 1 || st.Released != 1 || st.Refused != 0 || st.Waiting != 0 {
		t.Fatalf("admission stats %+v", st)
	}
}

// A host held longer than MaxWait is refused during its handshake, a plain TLS
// alert, and tries again later; the broker never reads its CONNECT.
func TestHeldTooLongIsRefused(t *testing.T) {
	m := newMesh(t)
	auth := byToken(map[string]broker.Grant{"host": everything("host", broker.AccountHosts)})
	s, _ := startWith(t, m, auth, func(c *broker.Config) {
		c.Admission = broker.Admission{Held: true, MaxWait: 100 * time.Millisecond}
	})
	if _, err := dial(t, s, m.ca.Pin(), nats.Token("host")); err == nil {
		t.Fatal("a held host connected")
	}
	if st := s.AdmissionStats(); st.Refused != 1 {
		t.Fatalf("admission stats %+v, want one refused", st)
	}
	if n := len(auth.calls()); n != 0 {
		t.Fatalf("the authenticator was asked %d times", n)
	}
	s.Open()
	mustDial(t, s, m.ca.Pin(), nats.Token("host"))
}

// Once open, the broker holds no handshake, and a socket that never starts one (a
// stranger's) holds one of its places for the handshake's own time, not for the
// time a held host may wait as well.
func TestOpenShortensTheTLSTimeout(t *testing.T) {
	m := newMesh(t)
	auth := byToken(map[string]broker.Grant{"host": everything("host", broker.AccountHosts)})
	s, _ := startWith(t, m, auth, func(c *broker.Config) {
		c.Admission = broker.Admission{Held: true, MaxWait: 5 * time.Second}
	})
	if got := s.TLSTimeout(); got != 8*time.Second {
		t.Fatalf("TLS timeout while held: %v, want 8s (5s held + 3s to shake hands)", got)
	}
	s.Open()
	if got := s.TLSTimeout(); got != 3*time.Second {
		t.Fatalf("TLS timeout once open: %v, want 3s", got)
	}
	conn, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	conn.SetReadDeadline(start.Add(10 * time.Second))
	_, err = io.Copy(io.Discard, conn)
	if took := time.Since(start); err != nil || took < 2*time.Second || took > 5*time.Second {
		t.Fatalf("a silent socket was closed after %v (err %v), want about 3s", took, err)
	}
	// Hosts still connect.
	mustDial(t, s, m.ca.Pin(), nats.Token("host"))
}
