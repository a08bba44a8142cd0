package broker_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/broker"
	"mesh/controlplane/pki"
)

// TestShedSendsHostsElsewhere: a broker that sheds its hosts (its control node cut
// off from the others) closes the host connections it holds and refuses new ones
// in their TLS handshake, at once and whether or not it was held; operators and the
// control plane's own in-process connections in the hosts' account stay. Unshed
// admits hosts again.
func TestShedSendsHostsElsewhere(t *testing.T) {
	m := newMesh(t)
	auth := byToken(map[string]broker.Grant{
		"host": {User: "host", Account: broker.AccountHosts, Publish: []string{">"}, Subscribe: []string{">"}, Host: true},
		"cp":   everything("cp", broker.AccountHosts),
		"op":   everything("op", broker.AccountOperators),
	})
	s, _ := start(t, m, auth)
	pin := m.ca.Pin()
	host := mustDial(t, s, pin, nats.Token("host"))
	operator := pki.PinnedClientConfig(pin)
	operator.NextProtos = []string{broker.OperatorProtocol}
	op := mustDial(t, s, pin, nats.Token("op"), nats.Secure(operator))
	own, err := nats.Connect("", nats.InProcessServer(s.InProcess()), nats.Token("cp"), nats.NoReconnect())
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()

	n, err := s.Shed()
	if err != nil || n != 1 {
		t.Fatalf("Shed closed %d connections (err %v), want the one host", n, err)
	}
	select {
	case <-host.closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the host's connection stayed open")
	}
	if !op.nc.IsConnected() || !own.IsConnected() {
		t.Fatalf("operator connected %v, in-process connected %v: only hosts are shed", op.nc.IsConnected(), own.IsConnected())
	}
	began := time.Now()
	if _, err := dial(t, s, pin, nats.Token("host")); err == nil {
		t.Fatal("a host connected to a broker that sheds its hosts")
	}
	if took := time.Since(began); took > time.Second {
		t.Fatalf("the refusal took %s: a shedding broker must not hold the host it refuses", took)
	}
	if st := s.AdmissionStats(); st.Isolated != 1 || !s.Shedding() {
		t.Fatalf("admission stats %+v, shedding %v: want one refused as isolated", st, s.Shedding())
	}
	mustDial(t, s, pin, nats.Token("op"), nats.Secure(operator))

	s.Unshed()
	mustDial(t, s, pin, nats.Token("host"))
}
