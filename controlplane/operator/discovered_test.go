package operator

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"mesh/controlplane/pki"
)

// TestBrokersAnnouncedInINFOAreNotDialled: a broker's INFO may list other brokers
// (connect_urls), and nats.go adds them to the addresses a connection dials when it
// reconnects. Nobody signs them: a broker that passes the pin check (a removed
// control node on the path) could list addresses of its choosing. Before, meshctl's
// connection took them; now it dials only the brokers it was given (mesh.json, the
// context, --servers).
func TestBrokersAnnouncedInINFOAreNotDialled(t *testing.T) {
	ca, _, err := pki.NewCA("m", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	first := brokerOf(t, ca, "cp-1", func(o *server.Options) {
		o.Cluster = server.ClusterOpts{Name: "m", Host: "127.0.0.1", Port: -1}
	})
	brokerOf(t, ca, "cp-2", func(o *server.Options) {
		o.Cluster = server.ClusterOpts{Name: "m", Host: "127.0.0.1", Port: -1}
		o.Routes = server.RoutesFromStr("nats://" + first.ClusterAddr().String())
	})
	addr := first.Addr().String()
	// A client of nats.go's defaults is told of cp-2: the test shows something.
	plain, err := nats.Connect("tls://"+addr, nats.Secure(pki.PinnedClientConfig(ca.Pin())), nats.TLSHandshakeFirst())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	for deadline := time.Now().Add(10 * time.Second); len(plain.DiscoveredServers()) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("cp-1 announced no other broker in 10 s: the test shows nothing")
		}
	}

	e, err := CAEndpoint([]string{addr}, credsFile(t), caFileOf(t, ca))
	if err != nil {
		t.Fatal(err)
	}
	c, err := DialEndpoint(e, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if found := c.nc.DiscoveredServers(); len(found) != 0 {
		t.Errorf("meshctl's connection took the brokers cp-1 announced: %v", found)
	}
	if pool := c.nc.Servers(); len(pool) != 1 || pool[0] != "tls://"+addr {
		t.Errorf("meshctl's connection dials %v, want only tls://%s", pool, addr)
	}
}
