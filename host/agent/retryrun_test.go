package agent

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"math/big"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"mesh/declarations"
	"mesh/host/state"
	"mesh/host/wire"
)

// meshBroker is a real nats-server under the fixture's CA, as the identity pins it,
// that lets the fixture's node log in with its key, and a client of the test's own
// standing for the mesh: it answers the node's syncs, hears its reports, and sends
// it envelopes. Each sync request is handed to answer, which may send envelopes
// first and returns how many it sent.
type meshBroker struct {
	s     *server.Server
	nc    *nats.Conn
	mu    sync.Mutex
	syncs []wire.SyncRequest
}

func startMeshBroker(t *testing.T, f *fixture, answer func(n int, req wire.SyncRequest) int) *meshBroker {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "test broker"},
		// Valid by the agent's clock (t0) and by the test client's (the machine's).
		NotBefore: t0.Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	if tmpl.NotAfter.After(f.ca.NotAfter) {
		tmpl.NotAfter = f.ca.NotAfter
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, f.ca, &key.PublicKey, f.caKey)
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		TLS: true, TLSHandshakeFirst: true, AlwaysEnableNonce: true,
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS13,
			Certificates: []tls.Certificate{{Certificate: [][]byte{der, f.ca.Raw}, PrivateKey: key}}},
		CustomClientAuthentication: testLogins{node: f.nodeKey}})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(s.Shutdown)
	if !s.ReadyForConnections(5 * time.Second) {
		t.Fatal("broker not ready")
	}
	addr := s.Addr().(*net.TCPAddr).String()
	pool := x509.NewCertPool()
	pool.AddCert(f.ca)
	nc, err := nats.Connect("tls://"+addr, nats.UserInfo("mesh", "test"), nats.TLSHandshakeFirst(),
		nats.Secure(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	mb := &meshBroker{s: s, nc: nc}
	if _, err := nc.Subscribe(f.a.id.Subjects.Sync, func(m *nats.Msg) {
		var req wire.SyncRequest
		if err := json.Unmarshal(m.Data, &req); err != nil {
			t.Errorf("a sync request that is not one: %v", err)
			return
		}
		mb.mu.Lock()
		mb.syncs = append(mb.syncs, req)
		n := len(mb.syncs)
		mb.mu.Unlock()
		sent := answer(n, req)
		reply := nats.NewMsg(m.Reply)
		reply.Header.Set(wire.SyncHeader, m.Header.Get(wire.SyncHeader))
		reply.Data = fmt.Appendf(nil, `{"v":%d,"sent":%d}`, wire.ProtocolVersion, sent)
		nc.PublishMsg(reply)
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	f.a.id.Brokers = []string{addr}
	return mb
}

// testLogins lets in the node by its key (its signature over the nonce is bound to
// the TLS session, which only the mesh's authentication checks; this broker is
// trusted for delivery only, as any is) and the test's own client.
type testLogins struct{ node string }

func (l testLogins) Check(c server.ClientAuthentication) bool {
	o := c.GetOpts()
	return o.Nkey == l.node || o.Username == "mesh" && o.Password == "test"
}

func (mb *meshBroker) syncCount() int {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	return len(mb.syncs)
}

// send publishes an envelope to the node, as the mesh does.
func (mb *meshBroker) send(t *testing.T, f *fixture, env []byte) {
	t.Helper()
	if err := mb.nc.Publish(f.a.id.Subjects.Declarations, env); err != nil {
		t.Fatal(err)
	}
	if err := mb.nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// TestARefusedRetryAsksTheMeshFromTheRunLoop: the running agent's own loop, over a
// real broker. A declaration fails to apply (a file where a directory must go); the
// signing keys rotate while its next attempt waits; the host is fixed by hand. The
// attempt, when the loop makes it, refuses the declaration (signed under the keyring
// before), and the loop asks the mesh at once for its copy, which applies. Without
// that request nothing would come: the mesh, told the node retries by itself, sends
// nothing until the declaration is re-signed, up to 12 hours later; no other message
// arrives meanwhile to start a sync. (TestARetryRefusedAfterARotationAsksTheMesh
// checks that the refusal asks; this checks that the loop sends the request.)
func TestARefusedRetryAsksTheMeshFromTheRunLoop(t *testing.T) {
	f := newFixture(t)
	// Long enough for the keyring to arrive before the attempt, on a slow machine.
	f.a.o.RetryMin = 2 * time.Second
	app := &switchedApplier{inner: f.a.applier}
	app.blocked.Store(true)
	f.a.applier = app
	kr, err := declarations.SignKeyring(declarations.Keyring{Mesh: "m", Epoch: 1, Keys: f.a.id.SigningKeys, IssuedAt: t0}, f.key)
	if err != nil {
		t.Fatal(err)
	}
	content := "one"
	fresh, err := declarations.SignDeclaration(declarations.Declaration{
		Mesh: "m", Node: "n-1", NodeKey: f.nodeKey, Version: 1, KeyringEpoch: 1, IssuedAt: t0, ExpiresAt: t0.Add(24 * time.Hour),
		Body: declarations.Body{Files: []declarations.File{{Path: "etc/app.conf", Content: &content}}},
	}, f.key)
	if err != nil {
		t.Fatal(err)
	}
	var mb *meshBroker
	mb = startMeshBroker(t, f, func(n int, req wire.SyncRequest) int {
		if n == 1 {
			return 0 // at connection: the declaration comes as a fan-out would, below
		}
		// Asked again: the mesh's copy, signed under the keyring of the moment.
		mb.send(t, f, fresh)
		return 1
	})
	synced := make(chan struct{}, 8)
	f.a.o.OnSynced = func() { synced <- struct{}{} }

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	select {
	case <-synced:
	case err := <-done:
		t.Fatalf("the agent stopped: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the agent did not connect and sync")
	}

	waitState := func(what string, within time.Duration, ok func(state.Applied) bool) {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			on, err := state.Load(f.dir)
			if err != nil {
				t.Fatal(err)
			}
			if ok(on) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the state holds v%d applied %v, %q v%d, next attempt %v; %d syncs", what,
					on.Version, on.HaveApplied, on.LastErrorCode, on.LastErrorVersion, on.NextAttempt, mb.syncCount())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	start := time.Now()
	mb.send(t, f, f.decl(t, 1, "one")) // under the keyring before the rotation
	waitState("the failed apply not recorded", 5*time.Second, func(on state.Applied) bool {
		return on.LastErrorCode == wire.StatusApplyFailed && on.LastErrorVersion == 1 && !on.NextAttempt.IsZero()
	})
	mb.send(t, f, kr)
	waitState("the keyring not accepted", 5*time.Second, func(on state.Applied) bool { return on.KeyringEpoch == 1 })
	app.blocked.Store(false) // fixed by hand
	if time.Since(start) >= f.a.o.RetryMin {
		t.Skipf("the keyring took %v to arrive, past the attempt it had to precede (a machine this slow cannot run this test)", time.Since(start))
	}
	if n := mb.syncCount(); n != 1 {
		t.Fatalf("%d syncs before the attempt; the test needs the one at connection only", n)
	}
	waitState("the mesh's copy not applied after the refused attempt", 10*time.Second, func(on state.Applied) bool {
		return on.HaveApplied && on.Version == 1 && on.LastErrorCode == "" && on.NextAttempt.IsZero()
	})
	if got := f.file(t); got != "one" {
		t.Fatalf("applied, the file holds %q", got)
	}
	mb.mu.Lock()
	second := mb.syncs[1]
	mb.mu.Unlock()
	if second.KeyringEpoch != 1 || second.HaveApplied {
		t.Fatalf("the request after the refused attempt: %+v", second)
	}
}
