package broker_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"mesh/broker"
	"mesh/controlplane/pki"
)

// controlNode is one control node's identity on the cluster port: its mutual TLS
// configuration and its leaf's pin.
type controlNode struct {
	name string
	tls  *tls.Config
	pin  string
}

func newControlNode(t *testing.T, ca *pki.CA, name string) controlNode {
	t.Helper()
	leaf, err := ca.IssueLeaf("control "+name, []net.IP{net.IPv4(127, 0, 0, 1)}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return controlNodeOf(t, ca, name, leaf)
}

func controlNodeOf(t *testing.T, ca *pki.CA, name string, leaf pki.Leaf) controlNode {
	t.Helper()
	cfg, err := pki.MutualConfig(leaf, ca.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pki.ParseCertificatePEM(leaf.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	pin := pki.PinOf(cert)
	return controlNode{name: name, tls: cfg, pin: hex.EncodeToString(pin[:])}
}

// startClustered starts node's broker routing to routes, pinned to pins.
func startClustered(t *testing.T, m *mesh, auth broker.Authenticator, node controlNode, listen string, routes, pins []string) (*broker.Server, *syncBuffer) {
	t.Helper()
	return startWith(t, m, auth, func(c *broker.Config) {
		c.Name = node.name
		c.Cluster = &broker.ClusterConfig{Listen: listen, Routes: routes, TLS: node.tls, Pins: pins}
	})
}

// others are the addresses in ports but the i-th.
func others(ports []string, i int) []string {
	return slices.Delete(slices.Clone(ports), i, i+1)
}

func waitRouted(t *testing.T, s *broker.Server, peer string, want bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for broker.RoutedTo(s)[peer] != want {
		if time.Now().After(deadline) {
			t.Fatalf("routed to %s: %v after 5s, want %v (routes to %v)", peer, !want, want, broker.RoutedTo(s))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// crosses reports whether a message published by pub reaches sub within a second.
func crosses(t *testing.T, pub *client, sub *nats.Subscription) bool {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if err := pub.nc.Publish(sub.Subject, []byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := pub.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		if _, err := sub.NextMsg(100 * time.Millisecond); err == nil {
			return true
		}
	}
	return false
}

// TestClusterPeersPinned: three control nodes' brokers A, B and C. When A's pins
// leave C out, the routes between A and C close, C cannot route back in (it keeps
// soliciting A) and A hears nothing C's clients publish, while B still reaches A;
// with C pinned again, or with no pins at all, C routes again. A client connected
// to A through each reload stays connected and keeps publishing, and nats-server
// reloads nothing but the cluster, its routes, and the users and accounts it
// reloads every time.
func TestClusterPeersPinned(t *testing.T) {
	t.Parallel() // waits on nats-server's route retries; owns its ports
	m := newMesh(t)
	a := controlNodeOf(t, m.ca, "cp-a", m.leaf)
	b, c := newControlNode(t, m.ca, "cp-b"), newControlNode(t, m.ca, "cp-c")
	ports := freePorts(t, 3)
	auth := byToken(map[string]broker.Grant{"t": everything("x", broker.AccountControl)})
	all := []string{a.pin, b.pin, c.pin}
	sa, logs := startClustered(t, m, auth, a, ports[0], others(ports, 0), all)
	sb, _ := startClustered(t, m, auth, b, ports[1], others(ports, 1), nil)
	sc, _ := startClustered(t, m, auth, c, ports[2], others(ports, 2), nil)
	brokers := map[string]*broker.Server{"cp-a": sa, "cp-b": sb, "cp-c": sc}
	for name, s := range brokers {
		for peer := range brokers {
			if peer != name {
				waitRouted(t, s, peer, true)
			}
		}
	}

	onA := mustDial(t, sa, m.ca.Pin(), nats.Token("t"))
	heard, err := onA.nc.SubscribeSync("across")
	if err != nil {
		t.Fatal(err)
	}
	self, err := onA.nc.SubscribeSync("self")
	if err != nil {
		t.Fatal(err)
	}
	onA.expectNoError(t)
	onB := mustDial(t, sb, m.ca.Pin(), nats.Token("t"))
	onC := mustDial(t, sc, m.ca.Pin(), nats.Token("t"))
	if !crosses(t, onC, heard) || !crosses(t, onB, heard) {
		t.Fatal("messages from B and C do not reach A before any change")
	}
	stillServed := func(when string) {
		t.Helper()
		select {
		case <-onA.closed:
			t.Fatalf("%s: the client connected to A was closed", when)
		default:
		}
		if !onA.nc.IsConnected() || !crosses(t, onA, self) {
			t.Fatalf("%s: the client connected to A no longer publishes", when)
		}
		onA.expectNoError(t)
	}

	asked := len(auth.calls())
	if err := sa.SetClusterPeers([]string{a.pin, b.pin}, []string{ports[1]}); err != nil {
		t.Fatal(err)
	}
	waitRouted(t, sa, "cp-c", false)
	waitRouted(t, sc, "cp-a", false)
	// C still lists A among its routes and redials it every second; B tells both
	// about the other. None of it gets C back in.
	for range 15 {
		time.Sleep(200 * time.Millisecond)
		if broker.RoutedTo(sa)["cp-c"] || broker.RoutedTo(sc)["cp-a"] {
			t.Fatalf("C routed to A again while A's pins leave it out: A routes to %v", broker.RoutedTo(sa))
		}
	}
	stillServed("after C was unpinned")
	if crosses(t, onC, heard) {
		t.Fatal("a message published on C reached a subscriber on A while A's pins leave C out")
	}
	if !crosses(t, onB, heard) {
		t.Fatal("B no longer reaches A")
	}
	// A reload has nats-server ask the authenticator again about every connected
	// client; the broker's own log says what changed.
	if len(auth.calls()) <= asked {
		t.Errorf("the authenticator was not asked again after the reload (%d calls before, %d after)", asked, len(auth.calls()))
	}
	for i, c := range auth.calls() {
		if c.Recheck != (i >= asked) {
			t.Errorf("call %d (of %d before the reload) says Recheck %v", i, asked, c.Recheck)
		}
	}
	if !strings.Contains(logs.String(), "cluster peers changed") {
		t.Errorf("no line says the cluster peers changed:\n%s", logs)
	}

	// The same peers again: nothing happens, not even a reauthentication.
	asked, lines := len(auth.calls()), strings.Count(logs.String(), "cluster peers changed")
	if err := sa.SetClusterPeers([]string{b.pin, strings.ToUpper(a.pin)}, []string{ports[1]}); err != nil {
		t.Fatal(err)
	}
	if len(auth.calls()) != asked || strings.Count(logs.String(), "cluster peers changed") != lines {
		t.Error("setting the same peers again reloaded the broker")
	}

	if err := sa.SetClusterPeers(all, others(ports, 0)); err != nil {
		t.Fatal(err)
	}
	waitRouted(t, sa, "cp-c", true)
	if !crosses(t, onC, heard) {
		t.Fatal("C pinned again, but its messages do not reach A")
	}
	stillServed("after C was pinned again")

	if err := sa.SetClusterPeers([]string{a.pin, b.pin}, others(ports, 0)); err != nil {
		t.Fatal(err)
	}
	waitRouted(t, sa, "cp-c", false)
	if err := sa.SetClusterPeers(nil, others(ports, 0)); err != nil {
		t.Fatal(err)
	}
	waitRouted(t, sa, "cp-c", true)
	waitRouted(t, sa, "cp-b", true)
	stillServed("after the pins were lifted")

	// nats-server took nothing else for changed (a new TLS configuration, say),
	// beyond the users and accounts it reloads whatever changed.
	expected := []string{"Reloaded: cluster", "Reloaded: cluster routes", "Reloaded: authorization users", "Reloaded: accounts"}
	reloaded := regexp.MustCompile(`Reloaded: [^"\n]*`).FindAllString(logs.String(), -1)
	for _, r := range reloaded {
		if !slices.Contains(expected, r) {
			t.Errorf("nats-server reloaded more than the cluster and its routes: %q", r)
		}
	}
	if len(reloaded) == 0 {
		t.Error("nats-server logged no reload")
	}
}

// TestClusterPinsAtStart: a broker started with pins refuses from the start a leaf
// of the mesh CA they leave out, and routes with it once it is pinned.
func TestClusterPinsAtStart(t *testing.T) {
	t.Parallel() // waits on nats-server's route retries; owns its ports
	m := newMesh(t)
	a := controlNodeOf(t, m.ca, "cp-a", m.leaf)
	b := newControlNode(t, m.ca, "cp-b")
	ports := freePorts(t, 2)
	auth := byToken(nil)
	sa, _ := startClustered(t, m, auth, a, ports[0], nil, []string{a.pin})
	sb, _ := startClustered(t, m, auth, b, ports[1], []string{ports[0]}, nil)
	for range 10 {
		time.Sleep(200 * time.Millisecond)
		if sa.NumRoutes() != 0 || sb.NumRoutes() != 0 {
			t.Fatalf("a leaf left out of the pins routed in: %v", broker.RoutedTo(sa))
		}
	}
	if err := sa.SetClusterPeers([]string{a.pin, b.pin}, nil); err != nil {
		t.Fatal(err)
	}
	waitRouted(t, sa, "cp-b", true)
}

// TestClusterPinsDoNotReplaceTheCA: a leaf of another CA is refused on the route
// port even when its pin is listed. Pins narrow what the mesh CA admits; they admit
// nothing of their own.
func TestClusterPinsDoNotReplaceTheCA(t *testing.T) {
	t.Parallel() // waits on nats-server's route retries; owns its ports
	m, other := newMesh(t), newMesh(t)
	a := controlNodeOf(t, m.ca, "cp-a", m.leaf)
	x := controlNodeOf(t, other.ca, "intruder", other.leaf)
	ports := freePorts(t, 2)
	auth := byToken(nil)
	sa, _ := startClustered(t, m, auth, a, ports[0], nil, []string{a.pin, x.pin})
	sx, _ := startWith(t, other, auth, func(c *broker.Config) {
		c.Name = x.name
		c.Cluster = &broker.ClusterConfig{Listen: ports[1], Routes: []string{ports[0]}, TLS: x.tls}
	})
	if err := sa.SetClusterPeers([]string{a.pin, x.pin}, []string{ports[1]}); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		time.Sleep(200 * time.Millisecond)
		if broker.RoutedTo(sa)["intruder"] || sx.NumRoutes() != 0 {
			t.Fatalf("a leaf of another CA routed in because its pin was listed: %v", broker.RoutedTo(sa))
		}
	}
}

// TestSetClusterPeersRefuses: a malformed pin or route changes nothing, and a broker
// started without a cluster has no peers to set.
func TestSetClusterPeersRefuses(t *testing.T) {
	m := newMesh(t)
	a := controlNodeOf(t, m.ca, "cp-a", m.leaf)
	auth := byToken(nil)
	ports := freePorts(t, 1)
	s, _ := startClustered(t, m, auth, a, ports[0], nil, nil)
	for _, tt := range []struct {
		name         string
		pins, routes []string
	}{
		{"pin not hex", []string{strings.Repeat("zz", 32)}, nil},
		{"pin too short", []string{a.pin[:62]}, nil},
		{"route not ip:port", []string{a.pin}, []string{"nowhere"}},
	} {
		if err := s.SetClusterPeers(tt.pins, tt.routes); err == nil {
			t.Errorf("%s: accepted", tt.name)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := broker.Start(ctx, broker.Config{Mesh: "test", Flows: testFlows, Listen: "127.0.0.1:0", TLS: m.server, Auth: auth, Logger: slog.New(slog.DiscardHandler),
		Cluster: &broker.ClusterConfig{Listen: freePorts(t, 1)[0], TLS: a.tls, Pins: []string{"not a pin"}}})
	if err == nil {
		t.Error("a broker started with a malformed pin")
	}
	alone, _ := start(t, m, auth)
	if err := alone.SetClusterPeers([]string{a.pin}, nil); err == nil {
		t.Error("cluster peers set on a broker without a cluster")
	}
}

// TestReloadNeverMovesAConnectionToAnotherAccount: every reload has the broker ask
// about each connection again. A connection whose grant now names another account
// (a node revoked while connected is granted the revoked account) is closed, not
// moved there with its subscriptions; one whose grant is unchanged stays.
func TestReloadNeverMovesAConnectionToAnotherAccount(t *testing.T) {
	m := newMesh(t)
	a, b := controlNodeOf(t, m.ca, "cp-a", m.leaf), newControlNode(t, m.ca, "cp-b")
	var mu sync.Mutex
	accounts := map[string]broker.Account{"moving": broker.AccountHosts, "staying": broker.AccountHosts}
	auth := &fakeAuth{decide: func(c broker.Client) (broker.Grant, error) {
		mu.Lock()
		defer mu.Unlock()
		acc, ok := accounts[c.Token]
		if !ok {
			return broker.Grant{}, broker.ErrRefused
		}
		return everything(c.Token, acc), nil
	}}
	ports := freePorts(t, 1)
	s, logs := startClustered(t, m, auth, a, ports[0], nil, []string{a.pin})
	moving := mustDial(t, s, m.ca.Pin(), nats.Token("moving"))
	staying := mustDial(t, s, m.ca.Pin(), nats.Token("staying"))
	moving.expectNoError(t)
	staying.expectNoError(t)

	mu.Lock()
	accounts["moving"] = broker.AccountRevoked
	mu.Unlock()
	if err := s.SetClusterPeers([]string{a.pin, b.pin}, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-moving.closed:
	case <-time.After(5 * time.Second):
		t.Fatal("a connection whose grant moved to another account is still open after the reload")
	}
	select {
	case <-staying.closed:
		t.Fatal("a connection whose grant did not change was closed by the reload")
	default:
	}
	staying.expectNoError(t)
	if !strings.Contains(logs.String(), "its grant moved to another account") {
		t.Errorf("the broker's log does not say why it closed the connection:\n%s", logs)
	}
}

// TestClusterPeersRefuseAHandshakeUnderWay: a route handshake under way while A's
// pins change is decided by the pins A holds when it checks the peer's leaf, not by
// those it held when it dialled. nats-server reads its options once per route
// connection, before dialling, and its reload closes only the routes already up: a
// route A was soliciting across the reload finished with the old pins and stayed up
// to a control node removed from the mesh (TestClusterPeersPinned failed so, now
// and then, under the race detector). Here A's check of C's leaf is held while A's
// pins drop C.
func TestClusterPeersRefuseAHandshakeUnderWay(t *testing.T) {
	t.Parallel() // waits on nats-server's route retries; owns its ports
	m := newMesh(t)
	a := controlNodeOf(t, m.ca, "cp-a", m.leaf)
	c := newControlNode(t, m.ca, "cp-c")
	held, release := make(chan struct{}), make(chan struct{})
	var hold, unhold sync.Once
	releaseHold := func() { unhold.Do(func() { close(release) }) }
	verify := a.tls.VerifyConnection
	a.tls = a.tls.Clone()
	a.tls.VerifyConnection = func(cs tls.ConnectionState) error {
		if err := verify(cs); err != nil {
			return err
		}
		if pin := pki.PinOf(cs.PeerCertificates[0]); hex.EncodeToString(pin[:]) == c.pin {
			hold.Do(func() { close(held); <-release })
		}
		return nil
	}
	ports := freePorts(t, 2)
	auth := byToken(nil)
	// C solicits nobody: the one handshake is A's, dialling C.
	startClustered(t, m, auth, c, ports[1], nil, nil)
	sa, _ := startClustered(t, m, auth, a, ports[0], []string{ports[1]}, []string{a.pin, c.pin})
	t.Cleanup(releaseHold) // before the brokers stop, which waits for the handshake
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("A never began a route handshake with C")
	}
	// C is removed from the mesh: A's pins and routes leave it out.
	set := make(chan error, 1)
	go func() { set <- sa.SetClusterPeers([]string{a.pin}, nil) }()
	select {
	case err := <-set:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("setting the peers waited for the handshake under way")
	}
	releaseHold()
	// The held handshake goes on, and must not route.
	for range 15 {
		time.Sleep(200 * time.Millisecond)
		if broker.RoutedTo(sa)["cp-c"] {
			t.Fatalf("a handshake under way when A's pins dropped C routed C in: %v", broker.RoutedTo(sa))
		}
	}
	// Nothing else kept C out: pinned and listed again, it routes.
	if err := sa.SetClusterPeers([]string{a.pin, c.pin}, []string{ports[1]}); err != nil {
		t.Fatal(err)
	}
	waitRouted(t, sa, "cp-c", true)
}

// heldRoute is a route connection to addr made with node's leaf: the TLS handshake
// done and the server's INFO read, its own CONNECT not sent yet (a peer decides when
// it sends it).
type heldRoute struct {
	conn *tls.Conn
	r    *bufio.Reader
	info string
}

func holdRoute(t *testing.T, node controlNode, addr string) *heldRoute {
	t.Helper()
	cfg := node.tls.Clone()
	cfg.ServerName = "127.0.0.1"
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatalf("route handshake as %s: %v", node.name, err)
	}
	t.Cleanup(func() { c.Close() })
	r := bufio.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	info, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(info, "INFO ") {
		t.Fatalf("route INFO: %q, %v", info, err)
	}
	return &heldRoute{conn: c, r: r, info: strings.TrimSpace(strings.TrimPrefix(info, "INFO "))}
}

// register sends the route's CONNECT and INFO as server name, and reports what the
// server answered until it answered PONG or closed the connection.
func (h *heldRoute) register(t *testing.T, name string) string {
	t.Helper()
	if _, err := h.conn.Write([]byte(h.connect(name) + "\r\n")); err != nil {
		return "write: " + err.Error()
	}
	return h.sendInfo(t, name)
}

// routeID is the server id of the route's peer named name.
func routeID(name string) string {
	return "NDROUTE" + strings.Repeat(strings.ToUpper(name[len(name)-1:]), 49)
}

// connect is the CONNECT of a route's peer named name.
func (h *heldRoute) connect(name string) string {
	return `CONNECT {"echo":false,"verbose":false,"pedantic":false,"tls_required":true,"headers":true,"name":"` + routeID(name) + `","cluster":"mesh","dynamic":false,"lnoc":true,"lnocu":true}`
}

// sendInfo sends the INFO (the broker's own, renamed, uncompressed) of a route's
// peer named name, and a PING, and reports what the broker answered until it
// answered PONG or closed the connection.
func (h *heldRoute) sendInfo(t *testing.T, name string) string {
	t.Helper()
	var info map[string]any
	if err := json.Unmarshal([]byte(h.info), &info); err != nil {
		t.Fatal(err)
	}
	info["server_id"], info["server_name"], info["name"], info["compression"] = routeID(name), name, name, "off"
	ours, _ := json.Marshal(info)
	if _, err := h.conn.Write([]byte("INFO " + string(ours) + "\r\nPING\r\n")); err != nil {
		return "write: " + err.Error()
	}
	_ = h.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	var got strings.Builder
	for {
		line, err := h.r.ReadString('\n')
		got.WriteString(line)
		if err != nil || strings.HasPrefix(line, "PONG") || strings.HasPrefix(line, "-ERR") {
			return got.String()
		}
	}
}

// TestARouteConnectAfterRemovalIsRefused: a control node that shook hands on A's
// cluster port while still pinned, and sends its route's CONNECT only after A's pins
// dropped it (its removal), is refused then (Authorization Violation) and never
// routed. Before, the handshake's pin check was the only one: an audit held such a
// connection across a removal, was routed in, and injected heartbeats into the
// control account 0.8 s after the removal committed. The same route registered
// before the removal is routed, then closed by it.
func TestARouteConnectAfterRemovalIsRefused(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	a, c := newControlNode(t, m.ca, "cp-a"), newControlNode(t, m.ca, "cp-c")
	ports := freePorts(t, 1)
	sa, _ := startClustered(t, m, byToken(nil), a, ports[0], nil, []string{a.pin, c.pin})
	early, held := holdRoute(t, c, ports[0]), holdRoute(t, c, ports[0])
	if got := early.register(t, "early-1"); !strings.Contains(got, "PONG") {
		t.Fatalf("a pinned peer's route was not taken: %q", got)
	}
	waitRouted(t, sa, "early-1", true)
	if err := sa.SetClusterPeers([]string{a.pin}, nil); err != nil { // cp-c removed
		t.Fatal(err)
	}
	waitRouted(t, sa, "early-1", false)
	got := held.register(t, "held-2")
	if !strings.Contains(got, "Authorization Violation") {
		t.Errorf("a route handshaken before the removal and registered after it was answered %q, want an authorization violation", got)
	}
	for range 10 {
		if broker.RoutedTo(sa)["held-2"] {
			t.Fatalf("the held route was routed in after the removal: %v", broker.RoutedTo(sa))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestARouteRegisteredAfterTheRemovalIsClosed: nats-server registers a route when
// its peer's INFO arrives, which the peer decides, and checks nothing then. A
// control node that passed the handshake (and, on a route it dialled, the CONNECT
// check) while still pinned, and sends its INFO only after A's pins dropped it, is
// routed in past the reload that closed its other routes. Before, it stayed; now
// A checks the routes again once such a route has registered or been closed, and
// the route is closed within RouteSweepAfter of its handshake. Both directions:
// the route cp-c dialled, and the one A dialled to cp-c.
func TestARouteRegisteredAfterTheRemovalIsClosed(t *testing.T) {
	t.Parallel()
	t.Run("accepted", func(t *testing.T) {
		t.Parallel()
		m := newMesh(t)
		a, c := newControlNode(t, m.ca, "cp-a"), newControlNode(t, m.ca, "cp-c")
		ports := freePorts(t, 1)
		sa, log := startClustered(t, m, byToken(nil), a, ports[0], nil, []string{a.pin, c.pin})
		shook := time.Now()
		held := holdRoute(t, c, ports[0])
		if _, err := held.conn.Write([]byte(held.connect("late-1") + "\r\n")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond) // the CONNECT is checked while cp-c is pinned
		if err := sa.SetClusterPeers([]string{a.pin}, nil); err != nil {
			t.Fatal(err)
		}
		registersThenIsClosed(t, sa, held, "late-1", shook)
		if !strings.Contains(log.String(), "checked again") {
			t.Error("the broker did not log the second check of its routes")
		}
	})
	t.Run("solicited", func(t *testing.T) {
		t.Parallel()
		sa, a, peer, dialled, shook := dialledByA(t)
		if err := sa.SetClusterPeers([]string{a.pin}, []string{peer.addr}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		registersThenIsClosed(t, sa, dialled, "late-2", shook)
	})
	// A route whose peer withholds its INFO past RouteRegisterWindow is closed by
	// nats-server as stale, never registered: what bounds the window above (it
	// rests on route compression being configured; without it, nats-server pings
	// and a peer answering them could hold the route for as long as it liked).
	t.Run("withheld past the window", func(t *testing.T) {
		t.Parallel()
		sa, _, _, dialled, shook := dialledByA(t)
		// Keep the connection's reads going, answering nothing, as a peer that
		// withholds its INFO does.
		closed := make(chan string, 1)
		go func() {
			var got strings.Builder
			_ = dialled.conn.SetReadDeadline(shook.Add(2 * broker.RouteRegisterWindow))
			for {
				line, err := dialled.r.ReadString('\n')
				got.WriteString(line)
				if err != nil {
					closed <- got.String() + " (" + err.Error() + ")"
					return
				}
			}
		}()
		got := <-closed
		if !strings.Contains(got, "Stale Connection") {
			t.Fatalf("a route that withheld its INFO was not closed as stale: %q", got)
		}
		if took := time.Since(shook); took > broker.RouteRegisterWindow+2*time.Second {
			t.Errorf("closed after %s, want within the window (%s)", took, broker.RouteRegisterWindow)
		}
		if broker.RoutedTo(sa)["cp-c"] {
			t.Error("routed to the peer that withheld its INFO")
		}
	})
}

// keepAnswering answers the broker's pings on h from now on, as a peer that keeps
// its route up does (nats-server closes a route that leaves three unanswered).
func (h *heldRoute) keepAnswering() {
	_ = h.conn.SetReadDeadline(time.Time{})
	go func() {
		for {
			line, err := h.r.ReadString('\n')
			if err != nil {
				return
			}
			if strings.HasPrefix(line, "PING") {
				if _, err := h.conn.Write([]byte("PONG\r\n")); err != nil {
					return
				}
			}
		}
	}()
}

// dialledByA starts cp-a's broker, pinning cp-a and cp-c and routing to a cluster
// port the test plays as cp-c, and returns the route it dialled there, once its
// handshake passed (at shook).
func dialledByA(t *testing.T) (sa *broker.Server, a controlNode, peer *routeListener, dialled *heldRoute, shook time.Time) {
	t.Helper()
	m := newMesh(t)
	c := newControlNode(t, m.ca, "cp-c")
	a = newControlNode(t, m.ca, "cp-a")
	peer = listenAsRoute(t, c)
	sa, _ = startClustered(t, m, byToken(nil), a, freePorts(t, 1)[0], []string{peer.addr}, []string{a.pin, c.pin})
	return sa, a, peer, peer.next(t), time.Now()
}

// registersThenIsClosed sends h's late INFO as peer name, which registers the route
// (the window the second check closes), keeps the route's pings answered, and
// waits for the route to be closed within RouteSweepAfter of the handshake at
// shook, having held it up past RouteRegisterWindow.
func registersThenIsClosed(t *testing.T, s *broker.Server, h *heldRoute, name string, shook time.Time) {
	t.Helper()
	if got := h.sendInfo(t, name); !strings.Contains(got, "PONG") {
		t.Fatalf("the late INFO was answered %q, want the route registered (the window this test closes)", got)
	}
	h.keepAnswering()
	waitRouted(t, s, name, true)
	time.Sleep(broker.RouteRegisterWindow) // still routed: the pings are answered
	if !broker.RoutedTo(s)[name] {
		t.Fatal("the route closed before the second check: nothing this test holds")
	}
	waitUnrouted(t, s, name, shook.Add(broker.RouteSweepAfter+5*time.Second))
}

// waitUnrouted waits until s has no route up with peer, failing at deadline.
func waitUnrouted(t *testing.T, s *broker.Server, peer string, deadline time.Time) {
	t.Helper()
	for broker.RoutedTo(s)[peer] {
		if time.Now().After(deadline) {
			t.Fatalf("still routed to %s (routes to %v)", peer, broker.RoutedTo(s))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// peerInfo is the INFO a route's peer that accepted the connection sends, but for
// its names (sendInfo adds them).
const peerInfo = `{"cluster":"mesh","tls_required":true,"tls_verify":true,"headers":true,"proto":1,"version":"` + server.VERSION + `","lnoc":true,"lnocu":true,"route_pool_size":3}`

// routeListener is a control node's cluster port as a test plays it: each
// connection a broker dials is handed over once its TLS handshake passed, with the
// broker's CONNECT read.
type routeListener struct {
	addr  string
	conns chan *heldRoute
}

func listenAsRoute(t *testing.T, node controlNode) *routeListener {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", node.tls)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	l := &routeListener{addr: ln.Addr().String(), conns: make(chan *heldRoute, 16)}
	go func() {
		for {
			raw, err := ln.Accept()
			if err != nil {
				return
			}
			c := raw.(*tls.Conn)
			if c.Handshake() != nil {
				c.Close() // a dial after the removal, refused by the broker's pins
				continue
			}
			t.Cleanup(func() { c.Close() })
			// The broker sends its CONNECT; its INFO waits for the peer's when
			// route compression is configured.
			h := &heldRoute{conn: c, r: bufio.NewReader(c), info: peerInfo}
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			line, err := h.r.ReadString('\n')
			_ = c.SetReadDeadline(time.Time{})
			if err != nil || !strings.HasPrefix(line, "CONNECT ") {
				h.info = "" // next reports it
			}
			l.conns <- h
		}
	}()
	return l
}

// next is the next connection the broker dialled.
func (l *routeListener) next(t *testing.T) *heldRoute {
	t.Helper()
	select {
	case h := <-l.conns:
		if h.info == "" {
			t.Fatal("the broker sent no CONNECT on the route it dialled")
		}
		return h
	case <-time.After(10 * time.Second):
		t.Fatal("the broker dialled no route in 10s")
		return nil
	}
}
