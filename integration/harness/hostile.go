package harness

import (
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"mesh/broker"
	"mesh/controlplane/datadir"
	"mesh/controlplane/pki"
	"mesh/host/identity"
	"mesh/host/state"
	"mesh/tokenfmt"
)

// HostileBroker is a broker holding the mesh's own TLS identity, as a compromised
// control node's broker would: hosts that pin the mesh's CA accept it; it joins the
// mesh's cluster over a route with the same certificate, so the control plane's
// traffic to and from the hosts behind it passes through it; and it admits every
// client, so the test reads everything that crosses it and publishes whatever it
// likes to any host. It is what a host's verification of every declaration is for:
// the broker is trusted for delivery only.
type HostileBroker struct {
	Server *broker.Server
	// Conn is the test's connection to it: every subject of the hosts account.
	Conn *nats.Conn
	// control is a connection in the control account, where declarations are
	// published: what it sends reaches a host on any broker of the cluster.
	control *nats.Conn

	mu       sync.Mutex
	captured map[string][][]byte
}

type admitAll struct{}

func (admitAll) Authenticate(c broker.Client) (broker.Grant, error) {
	if c.Username == "control" {
		return broker.Grant{User: "control", Account: broker.AccountControl, Publish: []string{">"}, Subscribe: []string{">"}}, nil
	}
	return broker.Grant{User: "anyone", Account: broker.AccountHosts, Publish: []string{">"}, Subscribe: []string{">"}}, nil
}

// StartHostileBroker starts one on a free loopback port with cp's TLS identity, routed
// to cp and to the other control nodes given, and records every envelope sent on any
// node's declaration subject.
func StartHostileBroker(t testing.TB, cp *ControlPlane, others ...*ControlPlane) *HostileBroker {
	t.Helper()
	dir := datadir.Dir(cp.Dir)
	leaf, caPEM := meshIdentity(t, cp)
	serverTLS := meshServerTLS(t, cp)
	mutual, err := pki.MutualConfig(leaf, caPEM)
	if err != nil {
		t.Fatal(err)
	}
	ports := FreePorts(t, 2)
	routes := []string{cp.Cluster}
	for _, o := range others {
		routes = append(routes, o.Cluster)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv, err := broker.Start(ctx, broker.Config{
		Name: "hostile", Mesh: cp.Mesh, Listen: fmt.Sprintf("127.0.0.1:%d", ports[0]), TLS: serverTLS, Auth: admitAll{},
		// A broker of its own lets its own clients publish whatever it likes.
		HostLimits: broker.Limits{MaxPayload: 2 << 20, MaxSubscriptions: 1 << 16},
		Logger:     slog.New(slog.DiscardHandler),
		Flows:      broker.Flows{HostStreams: []string{"mesh.node.*.decl"}, OperatorServices: []string{"mesh.admin.>"}},
		Cluster:    &broker.ClusterConfig{Listen: fmt.Sprintf("127.0.0.1:%d", ports[1]), Routes: []string{cp.Cluster}, TLS: mutual},
	})
	if err != nil {
		t.Fatalf("hostile broker: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	Eventually(t, 10*time.Second, "the hostile broker routed into the mesh", func() bool { return srv.NumRoutes() >= len(routes) })
	cfg, err := dir.LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	pin, _ := cfg.Pin()
	nc, err := nats.Connect("tls://"+srv.Addr(), nats.Secure(pki.PinnedClientConfig(pin)), nats.TLSHandshakeFirst())
	if err != nil {
		t.Fatalf("connect to the hostile broker: %v", err)
	}
	t.Cleanup(nc.Close)
	control, err := nats.Connect("tls://"+srv.Addr(), nats.Secure(pki.PinnedClientConfig(pin)), nats.TLSHandshakeFirst(), nats.UserInfo("control", ""))
	if err != nil {
		t.Fatalf("connect to the hostile broker: %v", err)
	}
	t.Cleanup(control.Close)
	hb := &HostileBroker{Server: srv, Conn: nc, control: control, captured: map[string][][]byte{}}
	sub, err := nc.Subscribe("mesh.node.*.decl", func(m *nats.Msg) {
		hb.mu.Lock()
		hb.captured[m.Subject] = append(hb.captured[m.Subject], m.Data)
		hb.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	sub.SetPendingLimits(-1, -1)
	nc.Flush()
	return hb
}

// Addr is where hosts reach it.
func (hb *HostileBroker) Addr() string { return hb.Server.Addr() }

// Captured returns the envelopes recorded on node's declaration subject, oldest first.
func (hb *HostileBroker) Captured(node string) [][]byte {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	return append([][]byte(nil), hb.captured["mesh.node."+node+".decl"]...)
}

// Inject publishes raw once on node's declaration subject, as only a broker can: in
// the control account, where the mesh's declarations come from, so that it reaches
// the host on whichever broker of the cluster it is connected to.
func (hb *HostileBroker) Inject(t testing.TB, node string, raw []byte) {
	t.Helper()
	if err := hb.control.Publish("mesh.node."+node+".decl", raw); err != nil {
		t.Fatal(err)
	}
	if err := hb.control.Flush(); err != nil {
		t.Fatal(err)
	}
}

// InjectUntil injects raw every half second until cond holds or limit passes.
// Interest crosses routes asynchronously: a host that has just (re)subscribed on
// another broker may not be known here yet, and what is published before then
// reaches nobody. Delivering the same envelope twice is harmless to a host.
func (hb *HostileBroker) InjectUntil(t testing.TB, node string, raw []byte, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		hb.Inject(t, node, raw)
		for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			if cond() {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, limit)
		}
	}
}

// RouteThrough makes the host reach the mesh through addr: the brokers in its identity
// are replaced and the signed list of brokers it holds is forgotten, as a network that
// leads its next connection there would. (The next membership the mesh signs lists
// the real brokers again, for the connections after.) The agent must not be running.
func (h *Host) RouteThrough(addr string) {
	h.t.Helper()
	if _, _, err := net.SplitHostPort(addr); err != nil {
		h.t.Fatal(err)
	}
	id, err := identity.Load(h.State)
	if err != nil {
		h.t.Fatal(err)
	}
	id.Brokers = []string{addr}
	// identity.Save never replaces an identity: the test removes it first.
	if err := os.Remove(identity.Path(h.State)); err != nil {
		h.t.Fatal(err)
	}
	if err := identity.Save(h.State, id); err != nil {
		h.t.Fatal(err)
	}
	applied, err := state.Load(h.State)
	if err != nil {
		h.t.Fatal(err)
	}
	applied.Brokers, applied.MembershipVersion = nil, 0
	if err := state.Save(h.State, applied); err != nil {
		h.t.Fatal(err)
	}
}

// PublicKey returns the node key the host enrolled with.
func (h *Host) PublicKey() string {
	h.t.Helper()
	id, err := identity.Load(h.State)
	if err != nil {
		h.t.Fatal(err)
	}
	return id.PublicKey
}

// KeyPair returns the node key the host enrolled with, private half included.
func (h *Host) KeyPair(t testing.TB) nkeys.KeyPair {
	t.Helper()
	id, err := identity.Load(h.State)
	if err != nil {
		t.Fatal(err)
	}
	// nkeys' own pair, which attacks hand to nats.go and nkeys like any client's.
	kp, err := nkeys.FromSeed([]byte(id.Seed))
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// PendingKey prepares the key the host's next enrolment with tokenText will present
// (as an enrolment interrupted after generating it would have left it), and returns
// its public half: a test can then watch that enrolment from outside.
func (h *Host) PendingKey(t testing.TB, tokenText string) string {
	t.Helper()
	tok, err := tokenfmt.Parse(strings.TrimSpace(tokenText), time.Now().Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	th := tok.SecretHash()
	if err := identity.SavePending(h.State, identity.Pending{Format: identity.FormatVersion, Mesh: tok.Mesh, Node: tok.Node,
		TokenHash: hex.EncodeToString(th[:]), Seed: identity.Secret(seed), CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	return pub
}
