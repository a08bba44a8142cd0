package integration

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"mesh/broker"
	"mesh/controlplane/api"
	"mesh/controlplane/datadir"
	"mesh/controlplane/pki"
	"mesh/integration/harness"
	"mesh/tokenfmt"
)

// authViolation is how nats-server tells a client it refused its credentials.
const authViolation = "Authorization Violation"

// TestRelayHoldingAMeshLeafCannotLogIn (decision 0018): something that holds a leaf
// of the mesh CA (a removed control node) passes every client's pin check. On the
// path, it ends the client's TLS session, opens its own to the real broker and relays
// the protocol, the broker's nonce included. A signature over the bare nonce logs it
// in as the client there; a signature bound to the client's own session does not.
func TestRelayHoldingAMeshLeafCannotLogIn(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "bind")
	cp.Serve()
	h := harness.NewHost(t, bin, "web-1")
	if r := h.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: exit %d:\n%s", r.Code, r.Combined())
	}
	relay := harness.StartLeafRelay(t, cp)
	cfg, err := datadir.Dir(cp.Dir).LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	pin, err := cfg.Pin()
	if err != nil {
		t.Fatal(err)
	}

	// The attack is real: a client signing the bare nonce (an agent older than the
	// binding) is logged in through the relay, as itself, by the real mesh.
	kp := h.KeyPair(t)
	pub, _ := kp.PublicKey()
	old, err := nats.Connect("tls://"+relay.Addr(), nats.Secure(pki.PinnedClientConfig(pin)), nats.TLSHandshakeFirst(),
		nats.Nkey(pub, kp.Sign), nats.Timeout(5*time.Second), nats.NoReconnect())
	if err != nil {
		t.Fatalf("an unbound login through the relay was refused (%v): the relay does not relay, and this test shows nothing", err)
	}
	old.Close()
	if n := cp.Counter("mesh_broker_unbound_logins_total", "client=node"); n < 1 {
		t.Fatalf("mesh_broker_unbound_logins_total{client=node} = %v after a bare login", n)
	}

	// The agent: it signs the nonce bound to its session with the relay, and the mesh
	// refuses that signature on the relay's session.
	h.RouteThrough(relay.Addr())
	h.Run()
	harness.Eventually(t, 15*time.Second, "the mesh refuses the agent's login relayed by the leaf holder, twice", func() bool {
		return bytes.Count(relay.Answered(), []byte(authViolation)) >= 2
	})
	harness.Eventually(t, 10*time.Second, "web-1 offline", func() bool {
		n, ok := cp.Node("web-1")
		return ok && n.State == api.StateOffline
	})
	if !bytes.Contains(relay.Sent(), []byte(pub)) {
		t.Fatal("the relay saw no login from the agent: the test shows nothing")
	}

	// The operator: meshctl's user key signs bound too.
	r := cp.Ctl("nodes", "--servers", relay.Addr())
	if r.Code == 0 || !strings.Contains(strings.ToLower(r.Combined()), "authorization") {
		t.Fatalf("meshctl through the relay: exit %d, want the login refused:\n%s", r.Code, r.Combined())
	}
	if n := bytes.Count(relay.Answered(), []byte(authViolation)); n < 3 {
		t.Fatalf("the relay carried %d refusals, want the agent's and meshctl's", n)
	}
}

// TestEnrolmentThroughALeafRelaySendsNoSecret (decision 0018): an enrolment that
// meets the relay sends it no secret, only the token's id and a proof for the host's
// own key; the mesh refuses the relayed login; and the proof the relay read admits
// nobody else, even over a session of its own.
func TestEnrolmentThroughALeafRelaySendsNoSecret(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "bindenrol")
	cp.Serve()
	relay := harness.StartLeafRelay(t, cp)
	text := cp.Token("web-1")
	tok, err := tokenfmt.Parse(text, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	h := harness.NewHost(t, bin, "web-1")
	r := h.Enrol(tokenVia(t, text, relay.Addr()))
	if r.Code != hostExitUnreachable {
		t.Fatalf("enrol through the relay: exit %d, want %d (the mesh refused the login):\n%s", r.Code, hostExitUnreachable, r.Combined())
	}
	sent := relay.Sent()
	if !bytes.Contains(sent, []byte("CONNECT")) {
		t.Fatal("the relay saw no CONNECT: the test shows nothing")
	}
	secretHex := hex.EncodeToString(tok.Secret[:])
	if bytes.Contains(bytes.ToLower(sent), []byte(secretHex)) || bytes.Contains(sent, tok.Secret[:]) {
		t.Fatal("the secret crossed the relay")
	}
	if !bytes.Contains(relay.Answered(), []byte(authViolation)) {
		t.Fatal("the mesh did not refuse the relayed login")
	}

	// The relay replays what it read, from a session of its own with a key of its own.
	i := bytes.Index(sent, []byte("CONNECT "))
	line := sent[i+len("CONNECT "):]
	line = line[:bytes.IndexByte(line, '\r')]
	var connect struct {
		User string `json:"user"`
		Pass string `json:"pass"`
	}
	if err := json.Unmarshal(line, &connect); err != nil || !strings.HasPrefix(connect.Pass, "proof1.") {
		t.Fatalf("the CONNECT the relay read: %v %q", err, line)
	}
	cfg, _ := datadir.Dir(cp.Dir).LoadConfig()
	pin, _ := cfg.Pin()
	attacker, _ := nkeys.CreateUser()
	apub, _ := attacker.PublicKey()
	d := &broker.BoundDialer{TLS: pki.PinnedClientConfig(pin), Timeout: 5 * time.Second}
	nc, err := nats.Connect("tls://"+cp.Listen, nats.SetCustomDialer(d), nats.TLSHandshakeFirst(),
		nats.UserInfo(connect.User, connect.Pass), nats.Nkey(apub, d.Sign(attacker.Sign)), nats.Timeout(5*time.Second), nats.NoReconnect())
	if err == nil {
		nc.Close()
		t.Fatal("the proof the relay read admitted another key")
	}
	if !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("replayed proof: %v, want an authorization refusal", err)
	}

	// The same host, with the relay first and the mesh's own address next, enrols
	// with the same token: a refused login makes enrol try the next broker (another
	// control node may have room where one had none), and the relay saw no more
	// than the proof.
	tok.Brokers = mustAddrs(t, relay.Addr(), cp.Listen)
	if r := h.Enrol(tok.Encode()); r.Code != 0 || !strings.Contains(r.Combined(), relay.Addr()+": the mesh refused the login") {
		t.Fatalf("enrol with the relay first, then the mesh's own address: exit %d:\n%s", r.Code, r.Combined())
	}
	if sent := relay.Sent(); bytes.Contains(bytes.ToLower(sent), []byte(secretHex)) {
		t.Fatal("the secret crossed the relay")
	}
}

// TestRequireBoundLogins: with serve --require-bound-logins, a login signing the bare
// nonce (an older agent's, the stock nats CLI's) is refused; this version's agent,
// enrolment and meshctl, all bound, work as before.
func TestRequireBoundLogins(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "bindonly")
	cp.Serve("--require-bound-logins")
	h := harness.NewHost(t, bin, "web-1")
	if r := h.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: exit %d:\n%s", r.Code, r.Combined())
	}
	h.Run()
	body := t.TempDir() + "/b.json"
	writeFile(t, body, `{"files":[{"path":"f","content":"x"}]}`)
	if r := cp.Ctl("declare", "--node", "web-1", "--file", body); r.Code != 0 {
		t.Fatalf("declare: exit %d:\n%s", r.Code, r.Combined())
	}
	cp.WaitConverged("web-1", 1, 20*time.Second)

	cfg, _ := datadir.Dir(cp.Dir).LoadConfig()
	pin, _ := cfg.Pin()
	kp := h.KeyPair(t)
	pub, _ := kp.PublicKey()
	_, err := nats.Connect("tls://"+cp.Listen, nats.Secure(pki.PinnedClientConfig(pin)), nats.TLSHandshakeFirst(),
		nats.Nkey(pub, kp.Sign), nats.Timeout(5*time.Second), nats.NoReconnect())
	if !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("a bare nonce signature with --require-bound-logins: %v, want refused", err)
	}
	if n := cp.Counter("mesh_broker_unbound_logins_total", "client=node"); n < 1 {
		t.Fatalf("the refused bare login was not counted: %v", n)
	}
	if n := cp.Counter("mesh_broker_connections_refused_total"); n < 1 {
		t.Fatalf("the refused bare login is not among the refusals: %v", n)
	}
}

// TestAgentOlderThanTheBindingStillEnrols: without --require-bound-logins, an agent
// older than decision 0018 (it sends its token's secret and signs the bare nonce)
// still enrols and logs in as its node, and the broker counts both logins as unbound.
func TestAgentOlderThanTheBindingStillEnrols(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "bindold")
	cp.Serve()
	tok := parseToken(t, cp.Token("old-1"))
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	nc := enrollingConn(t, cp, tok, kp)
	sig, _ := kp.Sign(api.KeyProofMessage(tok.Mesh, tok.Node, pub))
	req, _ := json.Marshal(api.EnrolRequest{V: api.ProtocolVersion, Mesh: tok.Mesh, Node: tok.Node, Role: "worker",
		Secret: hexSecret(tok), PublicKey: pub, KeyProof: base64.StdEncoding.EncodeToString(sig),
		CAPin: hex.EncodeToString(tok.CAPin[:]), SigningKey: hex.EncodeToString(tok.SigningKey), Agent: "meshhost/older"})
	m, err := nc.Request(api.EnrolKeySubject(tok.Node, pub), req, 10*time.Second)
	if err != nil {
		t.Fatalf("the older agent's enrolment went unanswered: %v", err)
	}
	var resp api.EnrolResponse
	if err := json.Unmarshal(m.Data, &resp); err != nil || !resp.OK || resp.Node != "old-1" {
		t.Fatalf("the older agent's enrolment: %+v %v", resp.Error, err)
	}
	nc.Close()
	if n := cp.Counter("mesh_broker_unbound_logins_total", "client=enrolling"); n < 1 {
		t.Fatalf("the older enrolment was not counted as unbound: %v", n)
	}

	cfg, _ := datadir.Dir(cp.Dir).LoadConfig()
	pin, _ := cfg.Pin()
	node, err := nats.Connect("tls://"+cp.Listen, nats.Secure(pki.PinnedClientConfig(pin)), nats.TLSHandshakeFirst(),
		nats.Nkey(pub, kp.Sign), nats.CustomInboxPrefix(api.NodeInbox("old-1")), nats.Timeout(5*time.Second), nats.NoReconnect())
	if err != nil {
		t.Fatalf("the older agent's login as its node: %v", err)
	}
	defer node.Close()
	sync, _ := json.Marshal(api.SyncRequest{V: api.ProtocolVersion})
	if _, err := node.Request(api.SyncSubject("old-1"), sync, 10*time.Second); err != nil {
		t.Fatalf("the older agent's sync went unanswered: %v", err)
	}
	if n := cp.Counter("mesh_broker_unbound_logins_total", "client=node"); n < 1 {
		t.Fatalf("the older agent's login was not counted as unbound: %v", n)
	}
}
