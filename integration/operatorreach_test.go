package integration

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/broker"
	"mesh/controlplane/api"
	"mesh/controlplane/datadir"
	"mesh/controlplane/pki"
	"mesh/integration/harness"
)

// TestOperatorReach: the operator credentials in the stock nats CLI's hands (a bare
// nonce signature, the creds file as it is) reach the operator API and nats-server's
// read-only monitoring, and nothing else: not JetStream's API, not nats-server's
// requests that change it or read more than monitoring, not the automatic service
// imports every account has, not a node's or a control node's subjects; and they may
// subscribe to inboxes only, so they hear neither another operator's requests (a
// token.create carries its token's id and proof key) nor any node's traffic. A
// wildcard in a published subject is a literal token to the API, which refuses it.
func TestOperatorReach(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "opreach")
	cp.Serve()
	victim := harness.NewHost(t, bin, "victim")
	if r := victim.Enrol(cp.Token("victim")); r.Code != 0 {
		t.Fatalf("enrol victim: %s", r.Combined())
	}
	victim.Run()
	cp.WaitConverged("victim", 0, 20*time.Second)
	victimSpy := &spy{}
	victimSpy.watch(t, nodeConn(t, cp.Dir, victim.State, cp.Listen, make(chan error, 8)), "mesh.node.victim.decl", "_INBOX.node.victim.>")
	before := rosterDigest(t, cp)

	cfg, err := datadir.Dir(cp.Dir).LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	pin, _ := cfg.Pin()
	errs := make(chan error, 64)
	stock, err := nats.Connect("tls://"+cp.Listen, nats.UserCredentials(filepath.Join(cp.Dir, datadir.AdminCredsFile)),
		nats.Secure(pki.PinnedClientConfig(pin)), nats.TLSHandshakeFirst(), nats.NoReconnect(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatalf("the stock client with the operator credentials: %v", err)
	}
	defer stock.Close()
	// The broker's own id, for the requests addressed to one server.
	var ping struct {
		Server struct {
			ID string `json:"id"`
		} `json:"server"`
	}
	if m, err := stock.Request("$SYS.REQ.SERVER.PING", nil, 5*time.Second); err != nil {
		t.Fatalf("monitoring ping: %v", err)
	} else if err := json.Unmarshal(m.Data, &ping); err != nil || ping.Server.ID == "" {
		t.Fatalf("monitoring ping answered %s (%v)", m.Data, err)
	}
	hosts, err := broker.AccountName("opreach", broker.AccountHosts)
	if err != nil {
		t.Fatal(err)
	}
	expectViolation := func(what, subject string) {
		t.Helper()
		select {
		case err := <-errs:
			if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), subject) {
				t.Errorf("%s %s: %v, want a permissions violation naming it", what, subject, err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("the operator credentials may %s %s", what, subject)
		}
	}

	id := ping.Server.ID
	for _, subj := range []string{
		"$JS.API.INFO", "$JS.API.STREAM.CREATE.spy", "$JS.API.STREAM.LIST",
		"$SYS.REQ.SERVER." + id + ".KICK", "$SYS.REQ.SERVER." + id + ".RELOAD", "$SYS.REQ.SERVER." + id + ".LDM",
		"$SYS.REQ.SERVER." + id + ".PROFILEZ", "$SYS.REQ.SERVER." + id + ".IPQUEUESZ", "$SYS.REQ.SERVER." + id + ".RAFTZ",
		"$SYS.REQ.ACCOUNT.PING.CONNZ", "$SYS.REQ.ACCOUNT.PING.STATZ", "$SYS.REQ.ACCOUNT." + hosts + ".CONNZ",
		"$SYS.REQ.ACCOUNT." + hosts + ".SUBSZ", "$SYS.REQ.USER.INFO", "$SYS.ACCOUNT." + hosts + ".CONNECT",
		"mesh.node.victim.decl", "mesh.node.victim.sync", "mesh.node.victim.status", "_INBOX.node.victim.x",
		"mesh.enrol.victim", "mesh.control.cp-1.heartbeat", "_R_.ABCDEF.x",
	} {
		if err := stock.Publish(subj, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		stock.Flush()
		expectViolation("publish on", subj)
	}
	for _, subj := range []string{">", "$SYS.>", "$JS.>", "mesh.>", "mesh.admin.>", "mesh.admin.token.create",
		"mesh.node.*.decl", "mesh.node.victim.status", "_R_.>", "*.>"} {
		if _, err := stock.SubscribeSync(subj); err != nil {
			t.Fatal(err)
		}
		stock.Flush()
		expectViolation("subscribe to", subj)
	}

	// A wildcard published on the operator API is a literal token there: refused as
	// an unknown operation, nothing done.
	for _, subj := range []string{"mesh.admin.*", "mesh.admin.>", "mesh.admin.token.*"} {
		m, err := stock.Request(subj, []byte(`{"v":2,"op":"revoke","args":{"node":"victim"}}`), 5*time.Second)
		if err != nil {
			if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout) {
				continue // nothing served it: nothing done either
			}
			t.Fatalf("request on %s: %v", subj, err)
		}
		var r api.AdminResponse
		if err := json.Unmarshal(m.Data, &r); err != nil || r.Error == nil {
			t.Errorf("a request on %s answered %s: an operation ran", subj, m.Data)
		}
	}

	// Still an operator: the API answers it.
	if m, err := stock.Request(api.AdminSubject(api.OpPing), nil, 5*time.Second); err != nil {
		t.Fatalf("ping after the attempts: %v", err)
	} else if !strings.Contains(string(m.Data), `"mesh":"opreach"`) {
		t.Fatalf("ping answered %s", m.Data)
	}
	time.Sleep(time.Second) // anything misdelivered has arrived by now
	if seen := victimSpy.got(); len(seen) != 0 {
		t.Errorf("the victim received %d messages: %v", len(seen), seen)
	}
	if after := rosterDigest(t, cp); after != before {
		t.Fatalf("the mesh's state changed:\nbefore %s\nafter  %s", before, after)
	}
}
