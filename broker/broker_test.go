package broker_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"mesh/broker"
	"mesh/controlplane/pki"
)

// mesh is a CA with a server leaf for 127.0.0.1.
type mesh struct {
	ca     *pki.CA
	leaf   pki.Leaf
	server *tls.Config
}

func newMesh(t testing.TB) *mesh {
	t.Helper()
	ca, leaf, cfg := broker.NewTestLeaf(t)
	return &mesh{ca: ca, leaf: leaf, server: cfg}
}

// fakeAuth records every client it is asked about and answers with decide.
type fakeAuth struct {
	mu     sync.Mutex
	seen   []broker.Client
	decide func(broker.Client) (broker.Grant, error)
}

func (a *fakeAuth) Authenticate(c broker.Client) (broker.Grant, error) {
	a.mu.Lock()
	a.seen = append(a.seen, c)
	decide := a.decide
	a.mu.Unlock()
	return decide(c)
}

func (a *fakeAuth) calls() []broker.Client {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]broker.Client(nil), a.seen...)
}

// byToken grants each token the grant in the map; anything else is refused.
func byToken(grants map[string]broker.Grant) *fakeAuth {
	return &fakeAuth{decide: func(c broker.Client) (broker.Grant, error) {
		if g, ok := grants[c.Token]; ok && c.Token != "" {
			return g, nil
		}
		return broker.Grant{}, broker.ErrRefused
	}}
}

// syncBuffer is a log sink written from the broker's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testFlows are the mesh's own flows between accounts: declarations from the control
// account to hosts, the operator API from the control account to operators.
var testFlows = broker.Flows{HostStreams: []string{"mesh.node.*.decl"}, OperatorServices: []string{"mesh.admin.>"}}

// everything grants user every subject of account a.
func everything(user string, a broker.Account) broker.Grant {
	return broker.Grant{User: user, Account: a, Publish: []string{">"}, Subscribe: []string{">"}}
}

func start(t testing.TB, m *mesh, auth broker.Authenticator) (*broker.Server, *syncBuffer) {
	t.Helper()
	return startWith(t, m, auth, func(*broker.Config) {})
}

// startWith starts a broker of the test configuration, changed by change.
func startWith(t testing.TB, m *mesh, auth broker.Authenticator, change func(*broker.Config)) (*broker.Server, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := broker.Config{
		Mesh:   "test",
		Flows:  testFlows,
		Name:   "cp-1",
		Listen: "127.0.0.1:0",
		TLS:    m.server,
		Auth:   auth,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	change(&cfg)
	s, err := broker.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	return s, logs
}

// client collects a connection's asynchronous errors and its closing.
type client struct {
	nc     *nats.Conn
	errs   chan error
	closed chan struct{}
}

func dial(t testing.TB, s *broker.Server, pin [32]byte, opts ...nats.Option) (*client, error) {
	t.Helper()
	c := &client{errs: make(chan error, 16), closed: make(chan struct{})}
	var once sync.Once
	base := []nats.Option{
		nats.Secure(pki.PinnedClientConfig(pin)),
		nats.TLSHandshakeFirst(),
		nats.NoReconnect(),
		nats.Timeout(2 * time.Second),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case c.errs <- err:
			default:
			}
		}),
		nats.ClosedHandler(func(*nats.Conn) { once.Do(func() { close(c.closed) }) }),
	}
	nc, err := nats.Connect("tls://"+s.Addr(), append(base, opts...)...)
	if err != nil {
		return nil, err
	}
	c.nc = nc
	t.Cleanup(nc.Close)
	return c, nil
}

func mustDial(t testing.TB, s *broker.Server, pin [32]byte, opts ...nats.Option) *client {
	t.Helper()
	c, err := dial(t, s, pin, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// expectViolation waits for a permissions violation naming subject.
func (c *client) expectViolation(t *testing.T, kind, subject string) {
	t.Helper()
	select {
	case err := <-c.errs:
		if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), kind) || !strings.Contains(err.Error(), subject) {
			t.Fatalf("async error %v, want a %s permissions violation on %s", err, kind, subject)
		}
	case <-time.After(3 * time.Second):
		t.Fatalf("no permissions violation reported for %s %s", kind, subject)
	}
}

func (c *client) expectNoError(t *testing.T) {
	t.Helper()
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-c.errs:
		t.Fatalf("unexpected async error: %v", err)
	default:
	}
}

func TestStartRefusesBadConfig(t *testing.T) {
	m := newMesh(t)
	auth := byToken(nil)
	ctx := context.Background()
	for _, tt := range []struct {
		name string
		cfg  broker.Config
	}{
		{"no TLS", broker.Config{Mesh: "test", Flows: testFlows, Listen: "127.0.0.1:0", Auth: auth}},
		{"no authenticator", broker.Config{Mesh: "test", Flows: testFlows, Listen: "127.0.0.1:0", TLS: m.server}},
		{"listen not ip:port", broker.Config{Mesh: "test", Flows: testFlows, Listen: "nonsense", TLS: m.server, Auth: auth}},
		{"listen bad port", broker.Config{Mesh: "test", Flows: testFlows, Listen: "127.0.0.1:99999", TLS: m.server, Auth: auth}},
		{"bad cluster address", broker.Config{Mesh: "test", Flows: testFlows, Listen: "127.0.0.1:0", TLS: m.server, Auth: auth, Cluster: &broker.ClusterConfig{Listen: "x"}}},
		{"bad route", broker.Config{Mesh: "test", Flows: testFlows, Listen: "127.0.0.1:0", TLS: m.server, Auth: auth, Cluster: &broker.ClusterConfig{Listen: "127.0.0.1:0", Routes: []string{"nowhere"}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Logger = slog.New(slog.DiscardHandler)
			s, err := broker.Start(ctx, tt.cfg)
			if err == nil {
				s.Shutdown()
				t.Fatal("started")
			}
		})
	}
}

// A port in use fails the start with its reason, as soon as nats-server gives one:
// the reason went only to the log, and the start waited out its whole deadline (10 s
// for meshctl serve) to ask "is the address in use?". The reason is the system's,
// asked again, said with what to do (nats-server's own words said nothing of it).
func TestStartAddressInUse(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := broker.Start(ctx, broker.Config{Mesh: "test", Flows: testFlows, Listen: ln.Addr().String(), TLS: m.server, Auth: byToken(nil), Logger: slog.New(slog.DiscardHandler)})
	if err == nil {
		s.Shutdown()
		t.Fatal("started on an address in use")
	}
	if !errors.Is(err, broker.ErrNotReady) || !strings.Contains(err.Error(), ln.Addr().String()) || !errors.Is(err, syscall.EADDRINUSE) ||
		!strings.Contains(err.Error(), "another process listens there") {
		t.Fatalf("err = %v, want ErrNotReady naming the address and the cause", err)
	}
}

// Port 0 means a free port, as it does for net.Listen: nats-server alone would take
// it as "the default port 4222".
func TestListenPortZeroPicksAFreePort(t *testing.T) {
	m := newMesh(t)
	a, _ := start(t, m, byToken(nil))
	b, _ := start(t, m, byToken(nil))
	if a.Addr() == b.Addr() {
		t.Fatalf("two brokers on port 0 share %s", a.Addr())
	}
	for _, s := range []*broker.Server{a, b} {
		if strings.HasSuffix(s.Addr(), ":4222") || strings.HasSuffix(s.Addr(), ":0") {
			t.Fatalf("Addr() = %s", s.Addr())
		}
	}
}

func TestTLSHandshakeFirstOnly(t *testing.T) {
	t.Parallel() // waits on timers
	m := newMesh(t)
	auth := byToken(map[string]broker.Grant{"t": everything("x", broker.AccountControl)})
	s, _ := start(t, m, auth)

	// A client that waits for the INFO line in clear before TLS gets nothing.
	_, err := nats.Connect("tls://"+s.Addr(), nats.Secure(pki.PinnedClientConfig(m.ca.Pin())), nats.Token("t"), nats.Timeout(500*time.Millisecond), nats.NoReconnect())
	if err == nil {
		t.Fatal("a client without TLS-first connected")
	}
	// A plain-text client too.
	if _, err := nats.Connect("nats://"+s.Addr(), nats.Token("t"), nats.Timeout(500*time.Millisecond), nats.NoReconnect()); err == nil {
		t.Fatal("a plain-text client connected")
	}
	// A raw TCP client reading first receives no byte in clear.
	conn, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	buf := make([]byte, 64)
	if n, _ := conn.Read(buf); n > 0 {
		t.Fatalf("the broker spoke in clear: %q", buf[:n])
	}
	conn.Close()
	if n := len(auth.calls()); n != 0 {
		t.Fatalf("the authenticator was asked %d times about clients that never completed TLS", n)
	}
	// The proper client connects.
	mustDial(t, s, m.ca.Pin(), nats.Token("t"))
}

func TestPinMismatchReachesNoAuthenticator(t *testing.T) {
	m, other := newMesh(t), newMesh(t)
	auth := byToken(map[string]broker.Grant{"t": everything("x", broker.AccountControl)})
	s, _ := start(t, m, auth)
	_, err := dial(t, s, other.ca.Pin(), nats.Token("t"))
	if err == nil {
		t.Fatal("connected to a broker of another CA")
	}
	if n := len(auth.calls()); n != 0 {
		t.Fatalf("the credential reached the broker (%d authentications)", n)
	}
	_, inBytes, err := s.Traffic()
	if err != nil {
		t.Fatal(err)
	}
	if inBytes != 0 {
		t.Fatalf("the broker received %d application bytes from a client that refused it", inBytes)
	}
}

func TestRefusedClient(t *testing.T) {
	m := newMesh(t)
	auth := &fakeAuth{decide: func(broker.Client) (broker.Grant, error) { return broker.Grant{}, broker.ErrRefused }}
	s, logs := start(t, m, auth)
	_, err := dial(t, s, m.ca.Pin(), nats.UserInfo("enrol:web-1", "deadbeefsecret"))
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("err = %v, want an authorization violation", err)
	}
	calls := auth.calls()
	if len(calls) != 1 {
		t.Fatalf("%d authentications", len(calls))
	}
	c := calls[0]
	if c.Username != "enrol:web-1" || c.Password != "deadbeefsecret" || len(c.Nonce) == 0 || c.Remote == nil || c.TLS == nil {
		t.Fatalf("the authenticator saw %+v", c)
	}
	if !strings.HasPrefix(c.Remote.String(), "127.0.0.1:") {
		t.Fatalf("remote %v", c.Remote)
	}
	waitFor(t, func() bool { return strings.Contains(logs.String(), "client refused") })
	if strings.Contains(logs.String(), "deadbeefsecret") {
		t.Fatalf("the secret reached the log:\n%s", logs)
	}
}

func TestGrantsRestrictSubjects(t *testing.T) {
	m := newMesh(t)
	auth := byToken(map[string]broker.Grant{
		"cp": everything("control-plane", broker.AccountHosts),
		"node-a": {
			User:      "node:a",
			Account:   broker.AccountHosts,
			Publish:   []string{"mesh.node.a.status", "mesh.node.a.sync"},
			Subscribe: []string{"mesh.node.a.decl", "_INBOX.node.a.>"},
		},
	})
	s, _ := start(t, m, auth)
	cp := mustDial(t, s, m.ca.Pin(), nats.Token("cp"))
	node := mustDial(t, s, m.ca.Pin(), nats.Token("node-a"), nats.CustomInboxPrefix("_INBOX.node.a"))

	seen, err := cp.nc.SubscribeSync(">")
	if err != nil {
		t.Fatal(err)
	}
	cp.nc.Flush()

	// Allowed publish arrives.
	if err := node.nc.Publish("mesh.node.a.status", []byte("ok")); err != nil {
		t.Fatal(err)
	}
	node.expectNoError(t)
	if msg, err := seen.NextMsg(2 * time.Second); err != nil || msg.Subject != "mesh.node.a.status" {
		t.Fatalf("allowed publish: %v %v", msg, err)
	}

	// Publishing to another node's subjects, or declarations, is refused and reported.
	for _, subj := range []string{"mesh.node.b.status", "mesh.node.a.decl", "mesh.enrol.b", "mesh.admin.revoke"} {
		node.nc.Publish(subj, []byte("forged"))
		node.expectViolation(t, "Publish", subj)
	}
	// A marker after the refused publishes: the observer must see it first.
	node.nc.Publish("mesh.node.a.sync", []byte("marker"))
	node.nc.Flush()
	msg, err := seen.NextMsg(2 * time.Second)
	if err != nil || string(msg.Data) != "marker" {
		t.Fatalf("after refused publishes the observer got %v (%v), want the marker", msg, err)
	}

	// Subscribing beyond its own subjects is refused, wildcards included.
	for _, subj := range []string{"mesh.node.b.decl", "mesh.node.>", ">", "_INBOX.>", "mesh.node.*.decl", "_INBOX.node.b.x"} {
		if _, err := node.nc.SubscribeSync(subj); err != nil {
			t.Fatal(err)
		}
		node.expectViolation(t, "Subscription", subj)
	}
	// Its own declarations reach it; another node's do not.
	decl, err := node.nc.SubscribeSync("mesh.node.a.decl")
	if err != nil {
		t.Fatal(err)
	}
	node.expectNoError(t)
	cp.nc.Publish("mesh.node.b.decl", []byte("not yours"))
	cp.nc.Publish("mesh.node.a.decl", []byte("yours"))
	cp.nc.Flush()
	if msg, err := decl.NextMsg(2 * time.Second); err != nil || string(msg.Data) != "yours" {
		t.Fatalf("own declaration: %v %v", msg, err)
	}

	// Request and reply through its private inbox work.
	responder, err := cp.nc.Subscribe("mesh.node.a.sync", func(m *nats.Msg) { m.Respond([]byte("state")) })
	if err != nil {
		t.Fatal(err)
	}
	defer responder.Unsubscribe()
	cp.nc.Flush()
	reply, err := node.nc.Request("mesh.node.a.sync", []byte("?"), 2*time.Second)
	if err != nil || string(reply.Data) != "state" {
		t.Fatalf("sync request: %v %v", reply, err)
	}
}

func TestEmptyGrantAllowsNothing(t *testing.T) {
	m := newMesh(t)
	auth := byToken(map[string]broker.Grant{
		"cp":       everything("control-plane", broker.AccountControl),
		"sub-only": {User: "sub-only", Account: broker.AccountControl, Subscribe: []string{"allowed"}},
		"nothing":  {User: "nothing", Account: broker.AccountControl},
		"empty":    {User: "empty", Account: broker.AccountControl, Publish: []string{}, Subscribe: []string{}},
	})
	s, _ := start(t, m, auth)
	cp := mustDial(t, s, m.ca.Pin(), nats.Token("cp"))
	seen, _ := cp.nc.SubscribeSync(">")
	cp.nc.Flush()

	for _, tok := range []string{"sub-only", "nothing", "empty"} {
		t.Run(tok, func(t *testing.T) {
			c := mustDial(t, s, m.ca.Pin(), nats.Token(tok))
			c.nc.Publish("anything", []byte("x"))
			c.expectViolation(t, "Publish", "anything")
			c.nc.SubscribeSync("other")
			c.expectViolation(t, "Subscription", "other")
		})
	}
	cp.nc.Publish("marker", nil)
	cp.nc.Flush()
	if msg, err := seen.NextMsg(2 * time.Second); err != nil || msg.Subject != "marker" {
		t.Fatalf("a publish with an empty grant got through: %v %v", msg, err)
	}
	c := mustDial(t, s, m.ca.Pin(), nats.Token("sub-only"))
	if _, err := c.nc.SubscribeSync("allowed"); err != nil {
		t.Fatal(err)
	}
	c.expectNoError(t)
}

func TestDeadlineClosesTheConnection(t *testing.T) {
	t.Parallel() // waits on timers
	m := newMesh(t)
	const life = 1500 * time.Millisecond
	var deadline time.Time
	auth := &fakeAuth{decide: func(broker.Client) (broker.Grant, error) {
		deadline = time.Now().Add(life)
		return broker.Grant{User: "enrol:a", Account: broker.AccountHosts, Publish: []string{"mesh.enrol.a"}, Deadline: deadline}, nil
	}}
	s, _ := start(t, m, auth)
	c := mustDial(t, s, m.ca.Pin(), nats.UserInfo("enrol:a", "x"))
	select {
	case <-c.closed:
		if time.Now().Before(deadline.Add(-100 * time.Millisecond)) {
			t.Fatalf("closed %v before its deadline", time.Until(deadline))
		}
	case <-time.After(life + 5*time.Second):
		t.Fatal("the connection outlived its deadline")
	}
	if c.nc.IsConnected() {
		t.Fatal("still connected")
	}
}

func TestNoDeadlineStaysOpen(t *testing.T) {
	t.Parallel() // waits on timers
	m := newMesh(t)
	s, _ := start(t, m, byToken(map[string]broker.Grant{"t": everything("x", broker.AccountControl)}))
	c := mustDial(t, s, m.ca.Pin(), nats.Token("t"))
	select {
	case <-c.closed:
		t.Fatal("a connection without a deadline was closed")
	case <-time.After(700 * time.Millisecond):
	}
}

func TestKickAndConnections(t *testing.T) {
	m := newMesh(t)
	nodeKey, _ := nkeys.CreateUser()
	nodePub, _ := nodeKey.PublicKey()
	auth := &fakeAuth{decide: func(c broker.Client) (broker.Grant, error) {
		switch {
		case c.Token == "op":
			return everything("operator:alice", broker.AccountControl), nil
		case c.Nkey == nodePub:
			return broker.Grant{User: "node:a", Account: broker.AccountHosts, Publish: []string{"mesh.node.a.status"}, Subscribe: []string{"mesh.node.a.decl"}}, nil
		}
		return broker.Grant{}, broker.ErrRefused
	}}
	s, _ := start(t, m, auth)
	op1 := mustDial(t, s, m.ca.Pin(), nats.Token("op"))
	op2 := mustDial(t, s, m.ca.Pin(), nats.Token("op"))
	node := mustDial(t, s, m.ca.Pin(), nats.Nkey(nodePub, nodeKey.Sign))

	conns, err := s.Connections()
	if err != nil {
		t.Fatal(err)
	}
	// nats-server knows an nkey client by its key, whatever name the grant gave it.
	if conns["operator:alice"] != 2 || conns[nodePub] != 1 || conns["node:a"] != 0 {
		t.Fatalf("Connections() = %v", conns)
	}

	// Kicking by the granted name of an nkey client finds nothing...
	if n, err := s.Kick("node:a"); err != nil || n != 0 {
		t.Fatalf("Kick(granted name of an nkey client) = %d, %v; nats-server knows it by its key", n, err)
	}
	// ...kicking by its key closes it.
	if n, err := s.Kick(nodePub); err != nil || n != 1 {
		t.Fatalf("Kick(node key) = %d, %v", n, err)
	}
	waitClosed(t, node)
	// Token clients are known by the granted name.
	if n, err := s.Kick("operator:alice"); err != nil || n != 2 {
		t.Fatalf("Kick(operator:alice) = %d, %v", n, err)
	}
	waitClosed(t, op1)
	waitClosed(t, op2)
	if n, err := s.Kick("nobody"); err != nil || n != 0 {
		t.Fatalf("Kick(nobody) = %d, %v", n, err)
	}
	waitFor(t, func() bool { c, _ := s.Connections(); return len(c) == 0 })
}

func TestNkeyClientPresentsASignedNonce(t *testing.T) {
	m := newMesh(t)
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	auth := &fakeAuth{decide: func(broker.Client) (broker.Grant, error) {
		return everything("n", broker.AccountControl), nil
	}}
	s, _ := start(t, m, auth)
	mustDial(t, s, m.ca.Pin(), nats.Nkey(pub, kp.Sign))
	c := auth.calls()[0]
	if c.Nkey != pub || len(c.Nonce) == 0 || c.Sig == "" {
		t.Fatalf("saw %+v", c)
	}
	sig, err := base64.RawURLEncoding.DecodeString(c.Sig)
	if err != nil {
		t.Fatal(err)
	}
	if err := kp.Verify(c.Nonce, sig); err != nil {
		t.Fatal("the signature does not cover the nonce the authenticator was given")
	}
}

func TestUserJWTReachesTheAuthenticator(t *testing.T) {
	m := newMesh(t)
	account, _ := nkeys.CreateAccount()
	user, _ := nkeys.CreateUser()
	userPub, _ := user.PublicKey()
	seed, _ := user.Seed()
	claims := jwt.NewUserClaims(userPub)
	claims.Name = "admin"
	token, err := claims.Encode(account)
	if err != nil {
		t.Fatal(err)
	}
	auth := &fakeAuth{decide: func(c broker.Client) (broker.Grant, error) {
		if c.JWT == "" {
			return broker.Grant{}, broker.ErrRefused
		}
		return everything("operator:admin", broker.AccountControl), nil
	}}
	s, _ := start(t, m, auth)
	c := mustDial(t, s, m.ca.Pin(), nats.UserJWTAndSeed(token, string(seed)))
	calls := auth.calls()
	if len(calls) != 1 {
		t.Fatalf("%d authentications", len(calls))
	}
	got := calls[0]
	if got.JWT != token {
		t.Fatalf("the JWT did not reach the authenticator intact: %q", got.JWT)
	}
	sig, err := base64.RawURLEncoding.DecodeString(got.Sig)
	if err != nil {
		t.Fatal(err)
	}
	if err := user.Verify(got.Nonce, sig); err != nil {
		t.Fatal("the JWT user's nonce signature does not verify")
	}
	// The operator, granted everything, can publish anywhere: the throwaway trusted
	// operator key does not limit it.
	sub, _ := c.nc.SubscribeSync("mesh.admin.ping")
	c.nc.Publish("mesh.admin.ping", []byte("x"))
	c.expectNoError(t)
	if _, err := sub.NextMsg(2 * time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestTraffic(t *testing.T) {
	m := newMesh(t)
	s, _ := start(t, m, byToken(map[string]broker.Grant{"t": everything("x", broker.AccountControl)}))
	conns0, in0, err := s.Traffic()
	if err != nil {
		t.Fatal(err)
	}
	c := mustDial(t, s, m.ca.Pin(), nats.Token("t"))
	payload := bytes.Repeat([]byte("p"), 10_000)
	for range 3 {
		c.nc.Publish("x", payload)
	}
	c.nc.Flush()
	conns1, in1, err := s.Traffic()
	if err != nil {
		t.Fatal(err)
	}
	if conns1 != conns0+1 {
		t.Fatalf("connections %d → %d, want one more", conns0, conns1)
	}
	if in1-in0 < 30_000 {
		t.Fatalf("in-bytes grew by %d, want at least 30000", in1-in0)
	}
}

func TestMaxPayload(t *testing.T) {
	m := newMesh(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := broker.Start(ctx, broker.Config{Mesh: "test", Flows: testFlows, Listen: "127.0.0.1:0", TLS: m.server, MaxPayload: 1024,
		Auth: byToken(map[string]broker.Grant{"t": everything("x", broker.AccountControl)}), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	c := mustDial(t, s, m.ca.Pin(), nats.Token("t"))
	if got := c.nc.MaxPayload(); got != 1024 {
		t.Fatalf("MaxPayload = %d, want 1024", got)
	}
	if err := c.nc.Publish("x", make([]byte, 2048)); !errors.Is(err, nats.ErrMaxPayload) {
		t.Fatalf("oversized publish: %v", err)
	}
	d, _ := start(t, m, byToken(map[string]broker.Grant{"t": everything("x", broker.AccountControl)}))
	if got := mustDial(t, d, m.ca.Pin(), nats.Token("t")).nc.MaxPayload(); got != 2<<20 {
		t.Fatalf("default MaxPayload = %d, want 2 MiB", got)
	}
}

func TestCluster(t *testing.T) {
	t.Parallel() // waits on timers
	m := newMesh(t)
	mutual, err := pki.MutualConfig(m.leaf, m.ca.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	ports := freePorts(t, 2)
	auth := byToken(map[string]broker.Grant{"t": everything("x", broker.AccountControl)})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := broker.Start(ctx, broker.Config{Mesh: "test", Flows: testFlows, Name: "cp-1", Listen: "127.0.0.1:0", TLS: m.server, Auth: auth, Logger: slog.New(slog.DiscardHandler),
		Cluster: &broker.ClusterConfig{Listen: ports[0], Routes: []string{ports[1]}, TLS: mutual}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Shutdown()
	b, err := broker.Start(ctx, broker.Config{Mesh: "test", Flows: testFlows, Name: "cp-2", Listen: "127.0.0.1:0", TLS: m.server, Auth: auth, Logger: slog.New(slog.DiscardHandler),
		Cluster: &broker.ClusterConfig{Listen: ports[1], Routes: []string{ports[0]}, TLS: mutual}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Shutdown()
	waitFor(t, func() bool { return a.NumRoutes() > 0 && b.NumRoutes() > 0 })

	sub := mustDial(t, a, m.ca.Pin(), nats.Token("t"))
	pub := mustDial(t, b, m.ca.Pin(), nats.Token("t"))
	s, _ := sub.nc.SubscribeSync("across")
	sub.nc.Flush()
	deadline := time.Now().Add(5 * time.Second)
	for {
		pub.nc.Publish("across", []byte("hi"))
		pub.nc.Flush()
		if msg, err := s.NextMsg(100 * time.Millisecond); err == nil && string(msg.Data) == "hi" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a message did not cross the route")
		}
	}

	// A broker of another CA cannot join: its route is refused by mutual TLS.
	other := newMesh(t)
	otherMutual, _ := pki.MutualConfig(other.leaf, other.ca.CertPEM)
	x, err := broker.Start(ctx, broker.Config{Mesh: "test", Flows: testFlows, Name: "intruder", Listen: "127.0.0.1:0", TLS: other.server, Auth: auth, Logger: slog.New(slog.DiscardHandler),
		Cluster: &broker.ClusterConfig{Listen: freePorts(t, 1)[0], Routes: []string{ports[0]}, TLS: otherMutual}})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Shutdown()
	time.Sleep(time.Second)
	// By the peers routed to, not a count of routes: route pooling opens several
	// connections per peer, the last of them perhaps only now.
	if x.NumRoutes() != 0 || broker.RoutedTo(a)["intruder"] || !broker.RoutedTo(a)["cp-2"] {
		t.Fatalf("intruder routes %d, cp-1 routed to %v", x.NumRoutes(), broker.RoutedTo(a))
	}

	// What the control plane's presence asks of a broker: is another, by server id,
	// still part of the mesh? A peer routed to is; one refused never was; one shut
	// down is no more, and a broker that restarts does so under a new id.
	bID, xID := b.InProcess().ID(), x.InProcess().ID()
	if p := a.Peers(); len(p) != 1 || p[0] != bID || !a.Reachable(bID) || !a.Reachable(a.InProcess().ID()) || a.Reachable(xID) {
		t.Fatalf("cp-1's peers %v (cp-2 is %s); reachable: cp-2 %t, itself %t, the intruder %t",
			p, bID, a.Reachable(bID), a.Reachable(a.InProcess().ID()), a.Reachable(xID))
	}
	b.Shutdown()
	waitFor(t, func() bool { return !a.Reachable(bID) && len(a.Peers()) == 0 })
}

func freePorts(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}
	return out
}

func waitClosed(t *testing.T, c *client) {
	t.Helper()
	select {
	case <-c.closed:
	case <-time.After(5 * time.Second):
		t.Fatal("connection not closed")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLogsJSON: with slog's JSON handler, every line of the broker, nats-server's own
// included, is one JSON object with its level and component. A route that fails its
// handshake every second (a peer of another CA) is logged once in the interval.
func TestLogsJSON(t *testing.T) {
	t.Parallel() // waits on nats-server's route retries
	m := newMesh(t)
	mutual, err := pki.MutualConfig(m.leaf, m.ca.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	other := newMesh(t)
	otherMutual, err := pki.MutualConfig(other.leaf, other.ca.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	ports := freePorts(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	x, err := broker.Start(ctx, broker.Config{Mesh: "test", Flows: testFlows, Name: "intruder", Listen: "127.0.0.1:0", TLS: other.server, Auth: byToken(nil), Logger: slog.New(slog.DiscardHandler),
		Cluster: &broker.ClusterConfig{Listen: ports[1], TLS: otherMutual}})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Shutdown()
	logs := &syncBuffer{}
	a, err := broker.Start(ctx, broker.Config{Mesh: "test", Flows: testFlows, Name: "cp-1", Listen: "127.0.0.1:0", TLS: m.server, Auth: byToken(nil),
		Logger:  slog.New(slog.NewJSONHandler(logs, nil)),
		Cluster: &broker.ClusterConfig{Listen: ports[0], Routes: []string{ports[1]}, TLS: mutual}})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	a.Shutdown()

	handshakes := 0
	for line := range strings.Lines(logs.String()) {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("a log line is not one JSON object: %q: %v", line, err)
		}
		if r["component"] != "broker" || r["level"] == nil || r["msg"] == nil {
			t.Errorf("line %v: want a level, a message and component broker", r)
		}
		if msg, _ := r["msg"].(string); strings.Contains(msg, "TLS route handshake error") {
			handshakes++
			// A warning: whoever reaches the port can fail a handshake there.
			if r["level"] != "WARN" {
				t.Errorf("a handshake error at %v", r["level"])
			}
		}
	}
	if handshakes != 1 {
		t.Errorf("the failing route's handshake error was logged %d times in 3 s, want once:\n%s", handshakes, logs)
	}
}

// TestARefusedClientsCredentialsAreNotKept (audit of secrets, finding 1): nats-server
// keeps a closed connection's options, shown to any operator in CONNZ (state
// closed), and a seed file given as creds goes out whole as the "JWT" (nats.go reads
// a file with no JWT block so). A refused client's JWT, password, token and user
// name are cleared before nats-server keeps them; the refusal still reaches the log,
// without them.
func TestARefusedClientsCredentialsAreNotKept(t *testing.T) {
	m := newMesh(t)
	auth := &fakeAuth{decide: func(broker.Client) (broker.Grant, error) { return broker.Grant{}, broker.ErrRefused }}
	s, logs := start(t, m, auth)
	account, _ := nkeys.CreateAccount()
	seed, _ := account.Seed()
	file := filepath.Join(t.TempDir(), "admin-account.nk")
	if err := os.WriteFile(file, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	// A token's secret (64 lowercase hex digits) pasted as a user name has the
	// letters of a name of the mesh's: it was logged whole.
	hexSecret := strings.Repeat("0123456789abcdef", 4)
	for _, opt := range []nats.Option{nats.UserCredentials(file), nats.UserInfo("SECRETUSER", "SECRETPASSWORD"), nats.Token("SECRETTOKEN"), nats.UserInfo(hexSecret, "x")} {
		if _, err := dial(t, s, m.ca.Pin(), opt); err == nil {
			t.Fatal("a client the authenticator refuses was admitted")
		}
	}
	if calls := auth.calls(); len(calls) != 4 || calls[0].JWT == "" {
		t.Fatalf("the authenticator saw %d logins, the first with JWT %q: the seed file's text should reach it as the JWT", len(calls), calls[0].JWT)
	}
	var connz *server.Connz
	waitFor(t, func() bool {
		var err error
		connz, err = s.InProcess().Connz(&server.ConnzOptions{State: server.ConnClosed, Username: true})
		return err == nil && len(connz.Conns) >= 4
	})
	kept, err := json.Marshal(connz)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{string(seed), "SECRETUSER", "SECRETPASSWORD", "SECRETTOKEN", hexSecret} {
		if strings.Contains(string(kept), secret) {
			t.Errorf("the closed connections keep %q:\n%s", secret, kept)
		}
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the log holds %q", secret)
		}
	}
	if !strings.Contains(logs.String(), "not shown: 64 bytes") {
		t.Errorf("the refusal of the hex user name does not say it was hidden:\n%s", logs.String())
	}
}
