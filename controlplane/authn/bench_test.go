package authn

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"mesh/broker"
	"mesh/controlplane/pki"
	"mesh/controlplane/state"
)

type allowAll struct{}

func (allowAll) Authenticate(broker.Client) (broker.Grant, error) {
	return broker.Grant{User: "anyone", AllowAll: true}, nil
}

// BenchmarkNodeConnect measures what a host's connection costs the broker: TLS 1.3
// handshake first, CONNECT with the node's nkey and nonce signature, the hook looking
// the key up in a roster of 10,000 nodes and verifying the signature, the grant
// registered. The baseline in the same run connects the same clients through the same
// TLS broker with a hook that allows everyone without a check, so the difference is
// the authentication. Run with:
// go test -run='^$' -bench=NodeConnect ./controlplane/authn/
func BenchmarkNodeConnect(b *testing.B) {
	fx := newFixture(b)
	const fleet = 10000
	keys := make([]nkeys.KeyPair, fleet)
	at := now0.Add(-time.Hour)
	for i := range fleet {
		keys[i] = mustKey(b, nkeys.CreateUser)
		pub, _ := keys[i].PublicKey()
		id := fmt.Sprintf("bench-%d", i)
		fx.apply(b, state.Command{Op: state.OpCreateToken, At: at, CreateToken: &state.CreateTokenCmd{ID: id, Node: id, Role: state.RoleWorker, TTL: time.Hour}})
		fx.apply(b, state.Command{Op: state.OpEnrol, At: at, Enrol: &state.EnrolCmd{TokenID: id, Node: id, Role: state.RoleWorker, PublicKey: pub}})
	}
	ca, _, err := pki.NewCA("bench", time.Now())
	if err != nil {
		b.Fatal(err)
	}
	leaf, _ := ca.IssueLeaf("bench", []net.IP{net.IPv4(127, 0, 0, 1)}, time.Now())
	serverTLS, _ := pki.ServerConfig(leaf, ca.CertPEM)
	auth := New(Config{FSM: fx.fsm, Logger: slog.New(slog.DiscardHandler)})
	for _, tc := range []struct {
		name string
		auth broker.Authenticator
	}{{"roster-nkey", auth}, {"baseline-allow-all", allowAll{}}} {
		srv, err := broker.Start(context.Background(), broker.Config{Name: "bench", Listen: "127.0.0.1:0", TLS: serverTLS, Auth: tc.auth, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := range b.N {
				kp := keys[i%fleet]
				pub, _ := kp.PublicKey()
				nc, err := nats.Connect("tls://"+srv.Addr(), nats.Secure(pki.PinnedClientConfig(ca.Pin())), nats.TLSHandshakeFirst(),
					nats.Nkey(pub, kp.Sign), nats.NoReconnect())
				if err != nil {
					b.Fatal(err)
				}
				nc.Close()
			}
		})
		srv.Shutdown()
	}
}
