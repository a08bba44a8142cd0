package link

import (
	"crypto/sha256"
	"testing"

	"github.com/nats-io/nats.go"

	"mesh/host/framing/framingtest"
)

// TestHostileBrokerCannotCrashTheConnection: a broker whose leaf chains to the
// pinned CA (a removed control node on the path, say) answers the login and then
// announces a message of 99999999999999999999 bytes. nats.go would have sized a
// buffer by it and panicked in its read loop, taking the agent down at every
// restart; the connection is closed instead, and the client lives on.
func TestHostileBrokerCannotCrashTheConnection(t *testing.T) {
	for name, hostile := range framingtest.Hostile {
		t.Run(name, func(t *testing.T) {
			addr, ca := framingtest.Broker(t, hostile)
			pin := sha256.Sum256(ca.RawSubjectPublicKeyInfo)
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
			framingtest.ExpectRefused(t, nc, err, closed)
		})
	}
}

// TestBrokersAnnouncedInINFOAreNotDialled: a broker's INFO may list other brokers
// (connect_urls), and nats.go adds them to the addresses a connection dials when it
// reconnects. Nobody signs them: a broker that passes the pin check (a removed
// control node on the path) could list addresses of its choosing, and every host
// would try them. Before, a host's connection took them; now it dials only the
// brokers it was given (its token, its identity, the signed membership).
func TestBrokersAnnouncedInINFOAreNotDialled(t *testing.T) {
	addr, ca := framingtest.BrokerSaying(t, `{"server_id":"S","version":"2.15.2","proto":1,"headers":true,"tls_required":true,"max_payload":2097152,"nonce":"bm9uY2U","connect_urls":["10.9.9.9:7300","127.0.0.1:1"]}`)
	pin := sha256.Sum256(ca.RawSubjectPublicKeyInfo)
	o := nats.GetDefaultOptions()
	o.Url = "tls://" + addr
	o.AllowReconnect = false
	for _, opt := range (Login{Pin: pin, PublicKey: "UNODE", Sign: func([]byte) ([]byte, error) { return []byte("sig"), nil }}).Options() {
		if err := opt(&o); err != nil {
			t.Fatal(err)
		}
	}
	nc, err := o.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if found := nc.DiscoveredServers(); len(found) != 0 {
		t.Errorf("the connection took the brokers a broker's INFO announced: %v", found)
	}
	if pool := nc.Servers(); len(pool) != 1 || pool[0] != "tls://"+addr {
		t.Errorf("the connection dials %v, want only tls://%s", pool, addr)
	}
}
