package broker_test

import (
	"strings"
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

// Open reloads nothing: nats-server asks the Authenticator again about every client
// connected on any reload, which a node opening amid a fleet's reconnections cannot
// afford.
func TestOpenReloadsNothing(t *testing.T) {
	m := newMesh(t)
	auth := byToken(map[string]broker.Grant{"host": everything("host", broker.AccountHosts)})
	s, logs := startWith(t, m, auth, func(c *broker.Config) {
		c.Admission = broker.Admission{Held: true, MaxWait: 5 * time.Second}
	})
	s.Open()
	mustDial(t, s, m.ca.Pin(), nats.Token("host"))
	mustDial(t, s, m.ca.Pin(), nats.Token("host"))
	if n := len(auth.calls()); n != 2 {
		t.Fatalf("the authenticator was asked %d times for 2 logins", n)
	}
	if strings.Contains(logs.String(), "Reloaded") {
		t.Fatalf("the broker reloaded its configuration:\n%s", logs.String())
	}
}
