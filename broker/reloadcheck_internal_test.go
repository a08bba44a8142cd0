package broker

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// askedAuth grants every client a host's subjects and records what it was asked.
type askedAuth struct {
	mu    sync.Mutex
	asked []Client
}

func (a *askedAuth) Authenticate(c Client) (Grant, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked = append(a.asked, c)
	return Grant{User: "node:b", Account: AccountHosts, Publish: []string{"mesh.node.b.status"}, Subscribe: []string{"mesh.node.b.decl"}}, nil
}

// inAccount is a client as nats-server shows it to the hook, in account acc.
type inAccount struct {
	opts server.ClientOpts
	acc  *server.Account
}

func (c *inAccount) GetOpts() *server.ClientOpts                 { return &c.opts }
func (c *inAccount) GetTLSConnectionState() *tls.ConnectionState { return nil }
func (c *inAccount) RegisterUser(*server.User)                   {}
func (c *inAccount) RemoteAddress() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
}
func (c *inAccount) GetNonce() []byte         { return []byte("nonce") }
func (c *inAccount) Kind() int                { return server.CLIENT }
func (c *inAccount) GetID() uint64            { return 7 }
func (c *inAccount) Account() *server.Account { return c.acc }

// TestAConnectIsNeverARecheck: a question that is not a reload's is a login,
// checked in full (Client.Recheck false), even while the broker reloads and even
// for a client that is in one of the mesh's accounts. A second CONNECT on a live
// connection replaces the client's options before nats-server asks, and a reload
// running meanwhile could put the client back in its account: answered as a
// recheck, a host presenting another node's key with any signature was granted that
// node's subjects (a review reproduced it under reloads). Rechecks are asked by a
// real reload (TestAReloadKeepsAClientThatHasNotLoggedInYet).
func TestAConnectIsNeverARecheck(t *testing.T) {
	_, _, cfg := testLeaf(t)
	auth := &askedAuth{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Start(ctx, Config{Mesh: "test", Name: "cp-1", Listen: "127.0.0.1:0", TLS: cfg, Auth: auth, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	hosts, err := s.ns.LookupAccount(s.accounts.names[AccountHosts])
	if err != nil {
		t.Fatal(err)
	}
	c := &inAccount{opts: server.ClientOpts{Nkey: "UAnotherNodesKey", Sig: "not a signature", Protocol: 1}, acc: hosts}
	for _, during := range []bool{false, true} {
		release := func() {}
		if during {
			release = HoldReload(s)
		}
		s.hook.Check(c)
		release()
	}
	auth.mu.Lock()
	defer auth.mu.Unlock()
	if len(auth.asked) != 2 {
		t.Fatalf("the authenticator was asked %d times, want twice", len(auth.asked))
	}
	for i, a := range auth.asked {
		if a.Recheck {
			t.Errorf("question %d (during a reload: %v) about a client in the hosts' account was passed as a recheck: its signature would not be checked", i, i == 1)
		}
	}
}
