package integration

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/controlplane/api"
	"mesh/controlplane/authn"
	"mesh/controlplane/datadir"
	"mesh/controlplane/pki"
	"mesh/host/identity"
	"mesh/integration/harness"
)

// Headers are the one part of a message the protocol never uses, and nats-server
// passes them on as the client wrote them: a header block is checked by nobody
// between a host and the control plane's subscriptions. These are the header cells
// of the authority model: a host writing a header block that does not parse, one far
// larger than its subject's budget, and nats-server's message-trace headers aimed at
// another node, at the operator API and at itself.

// badHeaderKey is a header key the test connection writes, in place of which the
// wire carries a line without a colon: a header block no parser accepts. nats.go
// writes only well-formed blocks, so the dialer spoils it below the client.
const badHeaderKey = "X-Mesh-Spoiled"

// spoilingDialer makes the pinned TLS session itself (as broker.BoundDialer does)
// and hands nats.go a connection that turns every "X-Mesh-Spoiled: " it writes into
// a line without a colon, of the same length.
type spoilingDialer struct{ tls *tls.Config }

func (d spoilingDialer) Dial(network, address string) (net.Conn, error) {
	raw, err := net.DialTimeout(network, address, 10*time.Second)
	if err != nil {
		return nil, err
	}
	c := tls.Client(raw, d.tls)
	if err := c.Handshake(); err != nil {
		raw.Close()
		return nil, err
	}
	return spoiling{c}, nil
}

func (spoilingDialer) SkipTLSHandshake() bool { return true }

type spoiling struct{ *tls.Conn }

func (s spoiling) Write(p []byte) (int, error) {
	q := bytes.ReplaceAll(p, []byte(badHeaderKey+": "), []byte(badHeaderKey+"  "))
	if _, err := s.Conn.Write(q); err != nil {
		return 0, err
	}
	return len(p), nil
}

// headerConn connects as the node whose identity is in state, through dialer d when
// given, and hands its asynchronous errors to errs.
func headerConn(t *testing.T, cp *harness.ControlPlane, state string, spoil bool, errs chan<- error) *nats.Conn {
	t.Helper()
	id, err := identity.Load(state)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := id.KeyPair()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := datadir.Dir(cp.Dir).LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	pin, _ := cfg.Pin()
	opts := []nats.Option{nats.TLSHandshakeFirst(), nats.Nkey(id.PublicKey, kp.Sign),
		nats.CustomInboxPrefix(id.Subjects.InboxPrefix), nats.NoReconnect(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		})}
	if spoil {
		opts = append(opts, nats.SetCustomDialer(spoilingDialer{pki.PinnedClientConfig(pin)}))
	} else {
		opts = append(opts, nats.Secure(pki.PinnedClientConfig(pin)))
	}
	nc, err := nats.Connect("tls://"+cp.Listen, opts...)
	if err != nil {
		t.Fatalf("connect as the node: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func TestHostileHeaders(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "headers")
	serve := cp.Serve()
	attacker := harness.NewHost(t, bin, "attacker")
	if r := attacker.Enrol(cp.Token("attacker")); r.Code != 0 {
		t.Fatalf("enrol attacker: %s", r.Combined())
	}
	victim := harness.NewHost(t, bin, "victim")
	if r := victim.Enrol(cp.Token("victim")); r.Code != 0 {
		t.Fatalf("enrol victim: %s", r.Combined())
	}
	// The victim runs its agent, converged, so the mesh owes it nothing: whatever
	// reaches its subjects from here on is the attack's.
	victim.Run()
	cp.WaitConverged("victim", 0, 20*time.Second)
	victimSpy := &spy{}
	victimSpy.watch(t, nodeConn(t, cp.Dir, victim.State, cp.Listen, make(chan error, 8)), "mesh.node.victim.decl", "_INBOX.node.victim.>")
	before := rosterDigest(t, cp)
	syncReq, _ := json.Marshal(api.SyncRequest{V: api.ProtocolVersion})

	// A header block that does not parse, on 40 syncs within the node's budget. The
	// control plane's client reports each such message as an asynchronous error;
	// with no handler of the control plane's own, nats.go printed a line to stderr
	// for every one, outside the log and its limits: a host wrote the control
	// node's journal at the rate of its budget.
	errs := make(chan error, 64)
	spoiled := headerConn(t, cp, attacker.State, true, errs)
	for i := range 40 {
		m := nats.NewMsg("mesh.node.attacker.sync")
		m.Header.Set(badHeaderKey, "v")
		m.Data = syncReq
		// Each is still answered: its body is the protocol's.
		if _, err := spoiled.RequestMsg(m, 10*time.Second); err != nil {
			t.Fatalf("spoiled sync %d unanswered: %v", i, err)
		}
	}
	lines, logged := 0, 0
	for _, l := range strings.Split(serve.Output(), "\n") {
		if strings.Contains(l, "could not decode headers") || strings.Contains(l, "reported an error") {
			lines++
		}
		if strings.Contains(l, "reported an error") && strings.Contains(l, "mesh.node.*.sync") {
			logged++
		}
	}
	if lines > 2 || logged == 0 {
		t.Errorf("40 messages with a header block that does not parse made %d lines of the control node's output (%d of its log), want 1 or 2 of the log (bounded like every drop):\n%s",
			lines, logged, serve.Output())
	}

	// Headers count against the subject's budget: a sync's body of 2 bytes behind
	// 32 KiB of headers is a 32 KiB sync, over its 1 KiB.
	bloated := headerConn(t, cp, attacker.State, false, make(chan error, 8))
	m := nats.NewMsg("mesh.node.attacker.sync")
	m.Header.Set("X-Padding", strings.Repeat("p", 32<<10))
	m.Data = []byte("{}")
	m.Reply = bloated.NewRespInbox()
	tooLarge := cp.Counter("mesh_control_messages_dropped_total", "subject=sync", "reason=too_large")
	if err := bloated.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	bloated.Flush()
	harness.Eventually(t, 10*time.Second, "a sync of 32 KiB of headers dropped as too large and its sender disconnected", func() bool {
		return cp.Counter("mesh_control_messages_dropped_total", "subject=sync", "reason=too_large") == tooLarge+1 &&
			(bloated.IsClosed() || !bloated.IsConnected())
	})
	// Disconnected for its budget, the key is refused on this broker for a while
	// (decision 0038): the attacker waits it out.
	time.Sleep(authn.KickCooldown)

	// Message tracing: nats-server publishes its trace of a message to the subject
	// the Nats-Trace-Dest header names, if the publisher may publish there. Another
	// node's subjects and inbox and the operator API are refused by the broker as
	// the publication itself would be; the node's own status takes the trace, which
	// reaches the leader only (a node may not subscribe to its own status), so the
	// node learns nothing of who hears its messages.
	for _, dest := range []string{"mesh.node.victim.status", "mesh.node.victim.sync", "mesh.node.victim.decl", "_INBOX.node.victim.x",
		"_INBOX.node.attacker.trace", api.AdminSubject(api.OpRevoke), "$SYS.REQ.SERVER.PING"} {
		errs := make(chan error, 8)
		nc := headerConn(t, cp, attacker.State, false, errs)
		m := nats.NewMsg("mesh.node.attacker.status")
		m.Header.Set("Nats-Trace-Dest", dest)
		m.Data, _ = json.Marshal(api.Status{V: api.ProtocolVersion, Node: "attacker"})
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
		nc.Flush()
		select {
		case err := <-errs:
			if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), dest) {
				t.Errorf("trace aimed at %s: %v, want a permissions violation naming it", dest, err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("the broker let a node aim its message's trace at %s", dest)
		}
		nc.Close()
	}
	var (
		mu    sync.Mutex
		heard []string
	)
	own := headerConn(t, cp, attacker.State, false, make(chan error, 8))
	if _, err := own.Subscribe("_INBOX.node.attacker.>", func(m *nats.Msg) {
		mu.Lock()
		heard = append(heard, string(m.Data))
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	dropped := func() float64 {
		return cp.Counter("mesh_control_messages_dropped_total", "subject=status") + cp.Counter("mesh_control_messages_dropped_total", "subject=sync")
	}
	droppedBefore := dropped()
	for _, h := range [][2]string{{"Nats-Trace-Dest", "mesh.node.attacker.status"}, {"Nats-Trace-Dest", "mesh.node.attacker.sync"}} {
		m := nats.NewMsg("mesh.node.attacker.status")
		m.Header.Set(h[0], h[1])
		m.Header.Add(h[0], "mesh.node.victim.status") // a second value is not read
		m.Header.Set("Nats-Trace-Only", "true")
		m.Data, _ = json.Marshal(api.Status{V: api.ProtocolVersion, Node: "attacker"})
		if err := own.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	own.Flush()
	harness.Eventually(t, 10*time.Second, "the traces on the node's own subjects reach the leader and are dropped", func() bool {
		return dropped() >= droppedBefore+2
	})
	time.Sleep(time.Second) // anything misdelivered has arrived by now
	mu.Lock()
	if len(heard) != 0 {
		t.Errorf("the node heard %d messages on its inbox after tracing its own: %q", len(heard), heard)
	}
	mu.Unlock()
	if seen := victimSpy.got(); len(seen) != 0 {
		t.Errorf("the victim received %d messages: %v", len(seen), seen)
	}
	if after := rosterDigest(t, cp); after != before {
		t.Fatalf("the mesh's state changed:\nbefore %s\nafter  %s", before, after)
	}
}
