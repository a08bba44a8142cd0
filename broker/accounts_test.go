package broker_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/broker"
	"mesh/controlplane/pki"
)

// accountGrants are the identities of the account tests: the control plane in the
// hosts and control accounts, an operator, a host and a listener for events.
func accountGrants() map[string]broker.Grant {
	return map[string]broker.Grant{
		"cp-hosts":   everything("cp-hosts", broker.AccountHosts),
		"cp-control": everything("cp-control", broker.AccountControl),
		"op": {User: "operator:alice", Account: broker.AccountOperators,
			Publish: append([]string{"mesh.admin.>"}, broker.MonitoringSubjects()...), Subscribe: []string{"_INBOX.>"}},
		"host": {User: "node:a", Account: broker.AccountHosts,
			Publish: []string{"mesh.node.a.status", "mesh.node.a.sync"}, Subscribe: []string{"mesh.node.a.decl", "_INBOX.node.a.>", "many.>"}},
		"events": {User: "events", Account: broker.AccountSystem, Subscribe: []string{"$SYS.ACCOUNT.>"}},
	}
}

// TestAccountsKeepSubjectsApart: a subject published in one account reaches another
// only along the declared flows, whatever the permissions inside an account allow.
func TestAccountsKeepSubjectsApart(t *testing.T) {
	m := newMesh(t)
	s, _ := start(t, m, byToken(accountGrants()))
	cpHosts := mustDial(t, s, m.ca.Pin(), nats.Token("cp-hosts"))
	cpControl := mustDial(t, s, m.ca.Pin(), nats.Token("cp-control"))
	op := mustDial(t, s, m.ca.Pin(), nats.Token("op"))
	host := mustDial(t, s, m.ca.Pin(), nats.Token("host"), nats.CustomInboxPrefix("_INBOX.node.a"))

	inHosts, _ := cpHosts.nc.SubscribeSync(">")
	inControl, _ := cpControl.nc.SubscribeSync(">")
	decl, _ := host.nc.SubscribeSync("mesh.node.a.decl")
	for _, c := range []*client{cpHosts, cpControl, host} {
		c.expectNoError(t)
	}

	// A host's status reaches the hosts account only.
	host.nc.Publish("mesh.node.a.status", []byte("up"))
	host.nc.Flush()
	if msg, err := inHosts.NextMsg(2 * time.Second); err != nil || msg.Subject != "mesh.node.a.status" {
		t.Fatalf("hosts account: %v %v", msg, err)
	}
	// The operator API's subject published in the hosts account goes nowhere near the
	// control account, where the API is served.
	cpHosts.nc.Publish("mesh.admin.signing-key.rotate", []byte("{}"))
	cpHosts.nc.Flush()
	inHosts.NextMsg(2 * time.Second) // its own copy

	// A declaration published in the control account reaches the host (the stream).
	cpControl.nc.Publish("mesh.node.a.decl", []byte("signed"))
	cpControl.nc.Publish("marker", nil)
	cpControl.nc.Flush()
	if msg, err := decl.NextMsg(2 * time.Second); err != nil || string(msg.Data) != "signed" {
		t.Fatalf("declaration stream: %v %v", msg, err)
	}
	// The control account saw its own two messages, and nothing from the hosts account.
	for _, want := range []string{"mesh.node.a.decl", "marker"} {
		msg, err := inControl.NextMsg(2 * time.Second)
		if err != nil || msg.Subject != want {
			t.Fatalf("control account: got %v (%v), want %s first: a message crossed from the hosts account", msg, err, want)
		}
	}

	// The operator reaches the API served in the control account; the responder sees
	// a reply subject the broker made, not the one the operator chose.
	api, err := cpControl.nc.Subscribe("mesh.admin.ping", func(msg *nats.Msg) {
		if !strings.HasPrefix(msg.Reply, "_R_.") {
			msg.Respond([]byte("reply subject " + msg.Reply + " was not rewritten"))
			return
		}
		msg.Respond([]byte("pong"))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Unsubscribe()
	cpControl.expectNoError(t)
	if reply, err := op.nc.Request("mesh.admin.ping", []byte("{}"), 2*time.Second); err != nil || string(reply.Data) != "pong" {
		t.Fatalf("operator API: %v %v", reply, err)
	}
	// A host cannot reach it at all, even as a reply.
	if _, err := host.nc.Request("mesh.admin.ping", nil, 300*time.Millisecond); err == nil {
		t.Fatal("a host reached the operator API")
	}

	// The operator reads nats-server's monitoring, and cannot use the rest of it.
	reply, err := op.nc.Request("$SYS.REQ.SERVER.PING", nil, 2*time.Second)
	if err != nil {
		t.Fatalf("server ping: %v", err)
	}
	var ping struct {
		Server struct {
			Name string `json:"name"`
		} `json:"server"`
	}
	if err := json.Unmarshal(reply.Data, &ping); err != nil || ping.Server.Name != "cp-1" {
		t.Fatalf("server ping answered %s (%v)", reply.Data, err)
	}
	op.nc.Publish("$SYS.REQ.SERVER.PING.KICK", []byte(`{"cid":1}`))
	op.expectViolation(t, "Publish", "$SYS.REQ.SERVER.PING.KICK")
}

// TestHostLimits: nats-server itself closes a host connection that publishes more than
// the hosts account's payload cap, and refuses a subscription past its count (the
// connection stays).
func TestHostLimits(t *testing.T) {
	m := newMesh(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := broker.Start(ctx, broker.Config{Mesh: "test", Flows: testFlows, Listen: "127.0.0.1:0", TLS: m.server,
		HostLimits: broker.Limits{MaxPayload: 1024, MaxSubscriptions: 3},
		Auth:       byToken(accountGrants()), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()

	// A client that ignores the cap it was told (nats.go would refuse locally).
	line := rawPublish(t, s, m.ca.Pin(), "host", "mesh.node.a.status", 2048)
	if !strings.Contains(line, "Maximum Payload Violation") {
		t.Fatalf("oversized publish answered %q, want a payload violation", line)
	}
	// Within the cap it is accepted.
	if line := rawPublish(t, s, m.ca.Pin(), "host", "mesh.node.a.status", 512); line != "PONG" {
		t.Fatalf("publish within the cap answered %q", line)
	}
	// Another account keeps the broker-wide cap.
	if line := rawPublish(t, s, m.ca.Pin(), "cp-control", "x", 2048); line != "PONG" {
		t.Fatalf("control account publish answered %q", line)
	}

	host := mustDial(t, s, m.ca.Pin(), nats.Token("host"))
	for i := range 3 {
		host.nc.SubscribeSync(fmt.Sprintf("many.%d", i))
	}
	host.expectNoError(t)
	host.nc.SubscribeSync("many.3")
	host.nc.Flush()
	select {
	case err := <-host.errs:
		if !strings.Contains(strings.ToLower(err.Error()), "maximum subscriptions") {
			t.Fatalf("a subscription past the cap answered %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("a subscription past the cap was not refused")
	}
}

// TestHostSubscriptionsDefault: by default a connection of the hosts account (and of
// the retired account) holds 4 subscriptions, what an agent needs and one more; the
// 5th is refused, on the node's own declaration subject too, where each one would be
// another copy of every declaration sent to the node. With 16, one host held 15 on
// each of its connections and had each answer to its syncs sent 60 times.
func TestHostSubscriptionsDefault(t *testing.T) {
	m := newMesh(t)
	grants := accountGrants()
	grants["retired"] = broker.Grant{User: "operator:bob of removed control node cp-2", Account: broker.AccountRetired,
		Subscribe: []string{"_INBOX.bob.>"}}
	s, _ := start(t, m, byToken(grants))
	if got := s.HostLimits().MaxSubscriptions; got != 4 {
		t.Fatalf("the broker says it enforces %d subscriptions a host connection, want 4", got)
	}
	for token, subject := range map[string]string{"host": "mesh.node.a.decl", "retired": "_INBOX.bob.x"} {
		c := mustDial(t, s, m.ca.Pin(), nats.Token(token))
		for range 4 {
			if _, err := c.nc.SubscribeSync(subject); err != nil {
				t.Fatal(err)
			}
		}
		c.expectNoError(t)
		c.nc.SubscribeSync(subject)
		c.nc.Flush()
		select {
		case err := <-c.errs:
			if !errors.Is(err, nats.ErrMaxSubscriptionsExceeded) {
				t.Fatalf("%s: the 5th subscription answered %v, want %v", token, err, nats.ErrMaxSubscriptionsExceeded)
			}
		case <-time.After(3 * time.Second):
			t.Fatalf("%s: a 5th subscription was not refused", token)
		}
		if !c.nc.IsConnected() {
			t.Errorf("%s: the connection was closed for it; the broker only refuses the subscription", token)
		}
	}
}

// rawPublish speaks the NATS protocol by hand over pinned TLS: CONNECT with token,
// PUB of size bytes, PING; it returns the first line after CONNECT that is not INFO.
func rawPublish(t *testing.T, s *broker.Server, pin [32]byte, token, subject string, size int) string {
	t.Helper()
	conn, err := tls.Dial("tcp", s.Addr(), pki.PinnedClientConfig(pin))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(conn)
	if info, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(info, "INFO") {
		t.Fatalf("no INFO: %q %v", info, err)
	}
	fmt.Fprintf(conn, "CONNECT {\"auth_token\":%q,\"verbose\":false,\"pedantic\":false,\"protocol\":1}\r\nPUB %s %d\r\n%s\r\nPING\r\n",
		token, subject, size, strings.Repeat("x", size))
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return "closed: " + err.Error()
		}
		if line = strings.TrimSpace(line); !strings.HasPrefix(line, "INFO") {
			return line
		}
	}
}

// TestClusterAccounts: across two brokers a declaration reaches its host exactly once,
// the operator API answers an operator on the other broker, and every broker answers
// a monitoring ping.
func TestClusterAccounts(t *testing.T) {
	t.Parallel() // waits on timers
	m := newMesh(t)
	mutual, err := pki.MutualConfig(m.leaf, m.ca.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	ports := freePorts(t, 2)
	auth := byToken(accountGrants())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var brokers []*broker.Server
	for i, name := range []string{"cp-1", "cp-2"} {
		b, err := broker.Start(ctx, broker.Config{Mesh: "test", Flows: testFlows, Name: name, Listen: "127.0.0.1:0", TLS: m.server, Auth: auth,
			Logger: slog.New(slog.DiscardHandler), Cluster: &broker.ClusterConfig{Listen: ports[i], Routes: []string{ports[1-i]}, TLS: mutual}})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Shutdown()
		brokers = append(brokers, b)
	}
	a, b := brokers[0], brokers[1]
	waitFor(t, func() bool { return a.NumRoutes() > 0 && b.NumRoutes() > 0 })

	host := mustDial(t, b, m.ca.Pin(), nats.Token("host"))
	decl, _ := host.nc.SubscribeSync("mesh.node.a.decl")
	host.expectNoError(t)
	cp := mustDial(t, a, m.ca.Pin(), nats.Token("cp-control"))
	api, _ := cp.nc.Subscribe("mesh.admin.ping", func(msg *nats.Msg) { msg.Respond([]byte("pong")) })
	defer api.Unsubscribe()
	cp.expectNoError(t)
	// Interest crosses the route asynchronously: publish until the first arrives.
	deadline := time.Now().Add(5 * time.Second)
	for {
		cp.nc.Publish("mesh.node.a.decl", []byte("probe"))
		cp.nc.Flush()
		if _, err := decl.NextMsg(200 * time.Millisecond); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no declaration crossed the route")
		}
	}
	for { // drain the probes
		if _, err := decl.NextMsg(300 * time.Millisecond); err != nil {
			break
		}
	}
	cp.nc.Publish("mesh.node.a.decl", []byte("once"))
	cp.nc.Flush()
	if msg, err := decl.NextMsg(2 * time.Second); err != nil || string(msg.Data) != "once" {
		t.Fatalf("declaration across the route: %v %v", msg, err)
	}
	if msg, err := decl.NextMsg(500 * time.Millisecond); err == nil {
		t.Fatalf("the declaration arrived twice (%q)", msg.Data)
	}

	op := mustDial(t, b, m.ca.Pin(), nats.Token("op"))
	if reply, err := op.nc.Request("mesh.admin.ping", []byte("{}"), 2*time.Second); err != nil || string(reply.Data) != "pong" {
		t.Fatalf("operator API across the route: %v %v", reply, err)
	}
	inbox := nats.NewInbox()
	pongs, _ := op.nc.SubscribeSync(inbox)
	op.nc.PublishRequest("$SYS.REQ.SERVER.PING", inbox, nil)
	op.nc.Flush()
	names := map[string]bool{}
	for len(names) < 2 {
		msg, err := pongs.NextMsg(3 * time.Second)
		if err != nil {
			t.Fatalf("server ping answered by %v only: %v", names, err)
		}
		var ping struct {
			Server struct {
				Name string `json:"name"`
			} `json:"server"`
		}
		json.Unmarshal(msg.Data, &ping)
		names[ping.Server.Name] = true
	}
}

// TestConnectionEvents: the system account hears every host connection open and close,
// on either broker, under the name the grant gave it.
func TestConnectionEvents(t *testing.T) {
	m := newMesh(t)
	s, _ := start(t, m, byToken(accountGrants()))
	ev := mustDial(t, s, m.ca.Pin(), nats.Token("events"))
	connect, disconnect := s.ConnectionEvents(broker.AccountHosts)
	opened, _ := ev.nc.SubscribeSync(connect)
	closed, _ := ev.nc.SubscribeSync(disconnect)
	ev.expectNoError(t)

	host := mustDial(t, s, m.ca.Pin(), nats.Token("host"))
	var e struct {
		Client struct {
			Name string `json:"name"`
			User string `json:"user"`
			ID   uint64 `json:"id"`
		} `json:"client"`
	}
	msg, err := opened.NextMsg(2 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	json.Unmarshal(msg.Data, &e)
	if e.Client.User != "node:a" {
		t.Fatalf("connect event for user %q, want node:a: %s", e.Client.User, msg.Data)
	}
	host.nc.Close()
	msg, err = closed.NextMsg(2 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	json.Unmarshal(msg.Data, &e)
	if e.Client.User != "node:a" {
		t.Fatalf("disconnect event for user %q: %s", e.Client.User, msg.Data)
	}
}

// TestRetiredOperatorsAnswersStayTheirs: the operator credentials of a removed
// control node log in to RETIRED, which imports the operator API's reads and nothing
// else. Whatever reply subject such a request names, the answer stays in RETIRED: in
// OPERATORS (the baseline below) a read naming another operator's inbox as its reply
// had the broker carry the answer there, or to any subject of OPERATORS.
func TestRetiredOperatorsAnswersStayTheirs(t *testing.T) {
	m := newMesh(t)
	grants := accountGrants()
	grants["retired"] = broker.Grant{User: "operator:old of removed control node cp-2", Account: broker.AccountRetired,
		Publish: []string{"mesh.admin.ping"}, Subscribe: []string{"_INBOX.op.OLD.>"}}
	// Every subject, to show that the account, not the permissions, keeps the rest out.
	grants["retired-wide"] = everything("retired-wide", broker.AccountRetired)
	grants["op-wide"] = everything("op-wide", broker.AccountOperators)
	s, _ := startWith(t, m, byToken(grants), func(c *broker.Config) {
		c.Flows.RetiredServices = []broker.Renamed{{Local: "mesh.admin.ping", Export: "mesh.retired.ping"}}
	})
	cpControl := mustDial(t, s, m.ca.Pin(), nats.Token("cp-control"))
	cpWrites := mustDial(t, s, m.ca.Pin(), nats.Token("cp-control"))
	op := mustDial(t, s, m.ca.Pin(), nats.Token("op"))
	retired := mustDial(t, s, m.ca.Pin(), nats.Token("retired"), nats.CustomInboxPrefix("_INBOX.op.OLD"))
	wide := mustDial(t, s, m.ca.Pin(), nats.Token("retired-wide"))
	opWide := mustDial(t, s, m.ca.Pin(), nats.Token("op-wide"))

	if _, err := cpControl.nc.Subscribe("mesh.admin.ping", func(msg *nats.Msg) { msg.Respond([]byte("pong")) }); err != nil {
		t.Fatal(err)
	}
	// The retired reads are served apart, under their own subjects.
	if _, err := cpControl.nc.Subscribe("mesh.retired.ping", func(msg *nats.Msg) { msg.Respond([]byte("retired pong")) }); err != nil {
		t.Fatal(err)
	}
	writes, _ := cpWrites.nc.SubscribeSync("mesh.admin.revoke")
	inOperators, _ := op.nc.SubscribeSync("_INBOX.>")
	for _, c := range []*client{cpControl, cpWrites, op} {
		c.expectNoError(t)
	}
	// next returns what sub received within a short wait, or nil.
	next := func(sub *nats.Subscription) *nats.Msg {
		msg, err := sub.NextMsg(500 * time.Millisecond)
		if err != nil {
			return nil
		}
		return msg
	}

	// Its reads work, on its own inbox.
	if reply, err := retired.nc.Request("mesh.admin.ping", []byte("{}"), 2*time.Second); err != nil || string(reply.Data) != "retired pong" {
		t.Fatalf("a read from RETIRED: %v %v", reply, err)
	}

	// Baseline: from OPERATORS, an answer goes where the request's reply says.
	opWide.nc.PublishRequest("mesh.admin.ping", "_INBOX.op.ALICE.reflected", []byte("{}"))
	opWide.nc.Flush()
	if msg := next(inOperators); msg == nil || msg.Subject != "_INBOX.op.ALICE.reflected" || string(msg.Data) != "pong" {
		t.Fatalf("baseline: an answer directed from OPERATORS at another operator's inbox did not arrive (%v): the test shows nothing", msg)
	}

	// From RETIRED, with every permission: nothing reaches another account.
	for _, reply := range []string{"_INBOX.op.ALICE.reflected", "mesh.admin.revoke", "_INBOX.x"} {
		wide.nc.PublishRequest("mesh.admin.ping", reply, []byte("{}"))
	}
	wide.nc.Publish("mesh.admin.revoke", []byte(`{"v":1,"op":"revoke"}`))
	wide.nc.Publish("mesh.controlstatus", []byte("{}"))
	wide.nc.Publish("$SYS.REQ.SERVER.PING", nil)
	wide.expectNoError(t)
	if msg := next(inOperators); msg != nil {
		t.Fatalf("an operator's inbox received %s %q from RETIRED", msg.Subject, msg.Data)
	}
	if msg := next(writes); msg != nil {
		t.Fatalf("mesh.admin.revoke in CONTROL received %q from RETIRED", msg.Data)
	}
}

// TestRetiredAccountHoldsFewConnections: the credentials of removed control nodes
// hold at most RetiredAccountConnections connections; before, one such file held
// every descriptor a control node keeps for operators, for as long as it liked, and
// an active operator's login was refused for "maximum connections".
func TestRetiredAccountHoldsFewConnections(t *testing.T) {
	m := newMesh(t)
	grants := accountGrants()
	grants["retired"] = broker.Grant{User: "operator:old of removed control node cp-2", Account: broker.AccountRetired,
		Publish: []string{"mesh.admin.ping"}, Subscribe: []string{"_INBOX.op.OLD.>"}}
	s, _ := startWith(t, m, byToken(grants), func(*broker.Config) {})
	for i := range broker.RetiredAccountConnections {
		c := mustDial(t, s, m.ca.Pin(), nats.Token("retired"), nats.CustomInboxPrefix("_INBOX.op.OLD"))
		if err := c.nc.Flush(); err != nil {
			t.Fatalf("retired connection %d: %v", i+1, err)
		}
	}
	if c, err := dial(t, s, m.ca.Pin(), nats.Token("retired"), nats.CustomInboxPrefix("_INBOX.op.OLD")); err == nil {
		if err := c.nc.Flush(); err == nil {
			t.Fatalf("connection %d of the retired account admitted", broker.RetiredAccountConnections+1)
		}
	}
	// An operator still logs in.
	op := mustDial(t, s, m.ca.Pin(), nats.Token("op"))
	if err := op.nc.Flush(); err != nil {
		t.Fatalf("an operator beside a full retired account: %v", err)
	}
}
