package integration

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"mesh/broker"
	"mesh/controlplane/api"
	"mesh/controlplane/authn"
	"mesh/controlplane/datadir"
	"mesh/controlplane/pki"
	"mesh/declarations"
	"mesh/host/identity"
	"mesh/host/state"
	"mesh/integration/harness"
	"mesh/tokenfmt"
)

// nodeConn connects as an enrolled node, with its own valid credentials, from the
// identity file: what a compromised host holds.
func nodeConn(t *testing.T, cpDir, state, listen string, errs chan<- error) *nats.Conn {
	t.Helper()
	id, err := identity.Load(state)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := id.KeyPair()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := datadir.Dir(cpDir).LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	pin, _ := cfg.Pin()
	nc, err := nats.Connect("tls://"+listen,
		nats.Secure(pki.PinnedClientConfig(pin)), nats.TLSHandshakeFirst(),
		nats.Nkey(id.PublicKey, kp.Sign), nats.CustomInboxPrefix(id.Subjects.InboxPrefix),
		nats.NoReconnect(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}),
	)
	if err != nil {
		t.Fatalf("connect as the node: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// TestCompromisedHostRefused: a host using its own valid credentials tries to read
// another node's declarations, publish a declaration, publish another node's status
// and use the operator API. The broker refuses every attempt, and each shows in the
// control plane's log.
func TestCompromisedHostRefused(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "compromised")
	serve := cp.Serve()
	evil := harness.NewHost(t, bin, "evil")
	victim := harness.NewHost(t, bin, "victim")
	for _, h := range []*harness.Host{evil, victim} {
		if r := h.Enrol(cp.Token(h.Name)); r.Code != 0 {
			t.Fatalf("enrol %s: %s", h.Name, r.Combined())
		}
	}
	victim.Run()
	cp.WaitConverged("victim", 0, 15*time.Second)
	errs := make(chan error, 64)
	nc := nodeConn(t, cp.Dir, evil.State, cp.Listen, errs)

	attempts := []struct {
		name string
		try  func() error
		want string // the subject the broker names in the violation
	}{
		{"read another node's declarations", func() error { _, err := nc.SubscribeSync("mesh.node.victim.decl"); return err }, "mesh.node.victim.decl"},
		{"read everything", func() error { _, err := nc.SubscribeSync(">"); return err }, ">"},
		{"publish a declaration to itself", func() error { return nc.Publish("mesh.node.evil.decl", []byte("{}")) }, "mesh.node.evil.decl"},
		{"publish a declaration to another node", func() error { return nc.Publish("mesh.node.victim.decl", []byte("{}")) }, "mesh.node.victim.decl"},
		{"publish another node's status", func() error {
			return nc.Publish("mesh.node.victim.status", []byte(`{"v":2,"node":"victim","have_applied":true,"applied_version":99}`))
		}, "mesh.node.victim.status"},
		{"use the operator API", func() error { return nc.PublishRequest("mesh.admin.nodes", "_INBOX.node.evil.x", []byte("{}")) }, "mesh.admin.nodes"},
		{"enrol as another node", func() error { return nc.Publish("mesh.enrol.victim", []byte("{}")) }, "mesh.enrol.victim"},
	}
	for _, a := range attempts {
		if err := a.try(); err != nil {
			t.Fatalf("%s: the client library refused locally: %v", a.name, err)
		}
		nc.Flush()
		select {
		case err := <-errs:
			if !strings.Contains(strings.ToLower(err.Error()), "permissions violation") || !strings.Contains(err.Error(), a.want) {
				t.Fatalf("%s: broker answered %v", a.name, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the broker did not refuse it", a.name)
		}
	}
	harness.Eventually(t, 5*time.Second, "violations in the control plane's log", func() bool {
		return strings.Count(serve.Output(), "Violation - Subject") >= len(attempts)
	})
	// Each attempt on its own violation line, by the subject the broker names
	// there (not the subject found anywhere in the log: ">" always is).
	violated := map[string]bool{}
	for _, line := range strings.Split(serve.Output(), "\n") {
		if !strings.Contains(line, "Violation - Subject") {
			continue
		}
		if _, rest, ok := strings.Cut(line, " subject="); ok {
			subject, _, _ := strings.Cut(rest, " ")
			violated[subject] = true
		}
	}
	for _, a := range attempts {
		if !violated[a.want] {
			t.Errorf("the control plane's log shows no violation on %s (it shows %v)", a.want, violated)
		}
	}
	if n, _ := cp.Node("victim"); n.Applied == nil || *n.Applied != 0 {
		t.Fatalf("the forged status moved the victim's applied version: %+v", n.Applied)
	}
}

// TestTokenAbuse: repeated wrong secrets from one address are rate limited and
// logged; other addresses are unaffected; nothing is recorded. The right secret is
// not what a block is for: it enrols from the blocked address (one that many share,
// a NAT or a proxy, was shut out by five made-up logins).
func TestTokenAbuse(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "abuse")
	serve := cp.Serve()
	good := cp.Token("web-1")
	tok, err := tokenfmt.Parse(good, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		wrong := tok
		rand.Read(wrong.Secret[:])
		r := harness.NewHost(t, bin, "guess").Enrol(wrong.Encode())
		// The broker refuses the login without saying why: login_refused, which a
		// run again may cure (exit 7), not token_unknown.
		if r.Code != hostExitUnreachable || !strings.Contains(r.Combined(), "login_refused") {
			t.Fatalf("guess %d: exit %d:\n%s", i, r.Code, r.Combined())
		}
	}
	harness.Eventually(t, 5*time.Second, "the block is logged", func() bool {
		return strings.Contains(serve.Output(), "enrolment attempts from this address are blocked")
	})
	// From the blocked address another guess is refused without a look...
	wrong := tok
	rand.Read(wrong.Secret[:])
	if r := harness.NewHost(t, bin, "guess").Enrol(wrong.Encode()); r.Code != hostExitUnreachable {
		t.Fatalf("a guess from a blocked address: exit %d:\n%s", r.Code, r.Combined())
	}
	if !strings.Contains(serve.Output(), "too many failed enrolment attempts") {
		t.Fatalf("refusals during the block are not logged:\n%s", serve.Output())
	}
	// ...while another address is not blocked: a wrong guess from 127.0.0.2 is
	// looked at (refused as a secret no token has), not refused as blocked; a right
	// secret would pass any block, so it would show nothing (a review of the
	// claims the docs make of this test).
	cfg, _ := datadir.Dir(cp.Dir).LoadConfig()
	pin, _ := cfg.Pin()
	refusedAs := func(reason *broker.Refusal) float64 {
		return harness.Sum(cp.Scrape(), "mesh_broker_connections_refused_total", "reason="+reason.Code)
	}
	blockedBefore, unknownBefore := refusedAs(authn.ErrRateLimited), refusedAs(authn.ErrUnknownSecret)
	guess := tok
	rand.Read(guess.Secret[:])
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	if nc, err := nats.Connect("tls://"+cp.Listen,
		nats.Secure(pki.PinnedClientConfig(pin)), nats.TLSHandshakeFirst(),
		nats.UserInfo("enrol:web-1", hexSecret(guess)), nats.Nkey(pub, kp.Sign), nats.NoReconnect(),
		nats.SetCustomDialer(&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 5 * time.Second}),
	); err == nil {
		nc.Close()
		t.Fatal("a wrong guess from another address was let in")
	}
	harness.Eventually(t, 5*time.Second, "the guess from 127.0.0.2 is refused as unknown", func() bool {
		return refusedAs(authn.ErrUnknownSecret) == unknownBefore+1
	})
	if refusedAs(authn.ErrRateLimited) != blockedBefore {
		t.Fatal("a guess from another address was refused as blocked: the block covers more than the address")
	}
	if _, ok := cp.Node("web-1"); ok {
		t.Fatal("a node was recorded by refused attempts")
	}
	// And the right secret enrols from the blocked address.
	h := harness.NewHost(t, bin, "web-1")
	if r := h.Enrol(good); r.Code != 0 {
		t.Fatalf("the right secret from the blocked address (exit %d):\n%s", r.Code, r.Combined())
	}
	if _, err := identity.Load(h.State); err != nil {
		t.Fatalf("identity: %v", err)
	}
}

func hexSecret(t tokenfmt.Token) string {
	e := t.Encode()
	return e[len(e)-9-64 : len(e)-9]
}

// TestRevocationDisconnectsWithinOneSecond: a revoked node that ignores the signed
// notice (a compromised host) is disconnected by the broker within a second of
// `meshctl revoke` returning. On reconnect its key is let in only to hear the signed
// notice again, in an account of its own. Enrolling the machine again with a new
// token gives a new identity; the old key still hears its notice and nothing of the
// new machine's declarations.
func TestRevocationDisconnectsWithinOneSecond(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "revoke")
	cp.Serve()
	h := harness.NewHost(t, bin, "web-1")
	if r := h.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	closed := make(chan time.Time, 1)
	errs := make(chan error, 8)
	nc := nodeConn(t, cp.Dir, h.State, cp.Listen, errs)
	nc.SetClosedHandler(func(*nats.Conn) { closed <- time.Now() })
	if _, err := nc.SubscribeSync("mesh.node.web-1.decl"); err != nil { // it reads the notice, and ignores it
		t.Fatal(err)
	}
	nc.Flush()

	r := cp.Ctl("revoke", "web-1")
	returned := time.Now()
	if r.Code != 0 || !strings.Contains(r.Stdout, "revoked web-1 (key ") || !strings.Contains(r.Stdout, "; 1 connection(s) open, closed now)") {
		t.Fatalf("revoke (%d): %s", r.Code, r.Combined())
	}
	select {
	case at := <-closed:
		if d := at.Sub(returned); d > time.Second {
			t.Fatalf("disconnected %s after revoke returned, want within 1s", d)
		}
	case <-time.After(time.Second):
		t.Fatal("still connected 1s after revoke returned")
	}
	old, _ := identity.Load(h.State)
	oldKey, _ := old.KeyPair()
	cfg, _ := datadir.Dir(cp.Dir).LoadConfig()
	pin, _ := cfg.Pin()
	var trusted []ed25519.PublicKey
	for _, k := range old.SigningKeys {
		b, _ := hex.DecodeString(k)
		trusted = append(trusted, ed25519.PublicKey(b))
	}
	// reconnect logs in with the revoked key, as its agent does, and reports what it
	// hears on the node's declaration subject after asking for its state: the broker
	// admits the key only to be told, signed, that it was revoked (decision 0016).
	// Keyrings, public, may come first (an agent stopped through a rotation needs
	// them to check the notice); nothing else may.
	reconnect := func(during func()) (notice bool, others int) {
		t.Helper()
		c, err := nats.Connect("tls://"+cp.Listen, nats.Secure(pki.PinnedClientConfig(pin)), nats.TLSHandshakeFirst(),
			nats.Nkey(old.PublicKey, oldKey.Sign), nats.NoReconnect(), nats.CustomInboxPrefix(api.NodeInbox("web-1")))
		if err != nil {
			t.Fatalf("the revoked key is not let in to hear its notice: %v", err)
		}
		defer c.Close()
		sub, err := c.SubscribeSync(api.DeclarationSubject("web-1"))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
		during()
		if _, err := c.Request(api.SyncSubject("web-1"), []byte(`{"v":2}`), 5*time.Second); err != nil {
			t.Fatalf("a revoked key's sync is not answered: %v", err)
		}
		for {
			m, err := sub.NextMsg(500 * time.Millisecond)
			if err != nil {
				return notice, others
			}
			if _, err := declarations.VerifyRevocation(m.Data, trusted, old.Mesh, "web-1", old.PublicKey); err == nil {
				notice = true
			} else if env, err := declarations.ParseEnvelope(m.Data); err != nil || env.PayloadType() != declarations.PayloadTypeKeyring {
				others++
			}
		}
	}
	if notice, others := reconnect(func() {}); !notice || others != 0 {
		t.Fatalf("the revoked key heard a signed notice: %v, and %d other envelopes", notice, others)
	}

	// Adopt the machine again: new token, fresh identity, new key.
	if err := os.Remove(identity.Path(h.State)); err != nil {
		t.Fatal(err)
	}
	os.Remove(state.Path(h.State))
	os.Remove(state.LegacyPath(h.State))
	if r := h.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol again with a new token (%d): %s", r.Code, r.Combined())
	}
	fresh, _ := identity.Load(h.State)
	if fresh.PublicKey == old.PublicKey {
		t.Fatal("the new enrolment reused the revoked key")
	}
	// The old key, let in again, hears its own notice and nothing of the node
	// enrolled since under its id: the revoked account shares no subject with the
	// hosts'.
	body := filepath.Join(t.TempDir(), "b.json")
	writeFile(t, body, `{"files":[{"path":"secret.conf","content":"for the new machine only"}]}`)
	declareNew := func() {
		if r := cp.Ctl("declare", "--node", "web-1", "--file", body); r.Code != 0 {
			t.Fatalf("declare for the new web-1: %s", r.Combined())
		}
	}
	if notice, others := reconnect(declareNew); !notice || others != 0 {
		t.Fatalf("after web-1 enrolled again, the old key heard a signed notice: %v, and %d envelopes of the new node", notice, others)
	}
	h.Run()
	if n, _ := cp.Node("web-1"); n.State == "revoked" || n.PublicKey != fresh.PublicKey {
		t.Fatalf("web-1 after re-enrolment: %+v", n)
	}
}

// TestRevokeSeveralInOneCall: one `meshctl revoke` names several nodes; they are
// revoked in one commit, and each one's connection is closed within a second,
// including one held on another control node's broker. A list with one unknown node
// revokes none of them.
func TestRevokeSeveralInOneCall(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "revokemany")
	cp.Serve()
	cp2 := joinControl(t, cp, "cp-2")
	type held struct {
		nc     *nats.Conn
		closed chan time.Time
	}
	conns := map[string]held{}
	for i, id := range []string{"web-1", "web-2", "web-3", "web-4"} {
		h := harness.NewHost(t, bin, id)
		if r := h.Enrol(cp.Token(id)); r.Code != 0 {
			t.Fatalf("enrol %s: %s", id, r.Combined())
		}
		broker := cp.Listen
		if i%2 == 1 {
			broker = cp2.Listen // a follower's broker: the leader closes it there
		}
		c := held{nc: nodeConn(t, cp.Dir, h.State, broker, make(chan error, 8)), closed: make(chan time.Time, 1)}
		c.nc.SetClosedHandler(func(*nats.Conn) { c.closed <- time.Now() })
		if _, err := c.nc.SubscribeSync("mesh.node." + id + ".decl"); err != nil { // reads the notice, ignores it
			t.Fatal(err)
		}
		c.nc.Flush()
		conns[id] = c
	}
	harness.Eventually(t, 10*time.Second, "the control plane sees every connection", func() bool {
		return cp.Counter("mesh_control_host_connections") == 4
	})

	if r := cp.Ctl("revoke", "web-1", "nobody", "web-2"); r.Code != 4 || !strings.Contains(r.Stderr, "no such node: nobody") || !strings.Contains(r.Stderr, "nothing was revoked, of the 3 nodes named") {
		t.Fatalf("revoke with an unknown node (%d): %s", r.Code, r.Combined())
	}
	for _, id := range []string{"web-1", "web-2"} {
		if n, _ := cp.Node(id); n.State == "revoked" {
			t.Fatalf("%s revoked by a refused request", id)
		}
	}

	r := cp.Ctl("revoke", "web-1", "web-2", "web-3", "--json")
	returned := time.Now()
	var res api.RevokeResult
	if err := json.Unmarshal([]byte(r.Stdout), &res); r.Code != 0 || err != nil || len(res.Revoked) != 3 {
		t.Fatalf("revoke web-1 web-2 web-3 (%d, %v): %s", r.Code, err, r.Combined())
	}
	for i, rv := range res.Revoked {
		if want := []string{"web-1", "web-2", "web-3"}[i]; rv.Node != want || rv.Connections != 1 {
			t.Fatalf("revoked[%d] = %+v, want %s with 1 connection", i, rv, want)
		}
	}
	for _, id := range []string{"web-1", "web-2", "web-3"} {
		select {
		case at := <-conns[id].closed:
			if d := at.Sub(returned); d > time.Second {
				t.Errorf("%s disconnected %s after revoke returned, want within 1s", id, d)
			}
		case <-time.After(time.Second):
			t.Errorf("%s still connected 1s after revoke returned", id)
		}
		if n, _ := cp.Node(id); n.State != "revoked" {
			t.Errorf("%s is %q", id, n.State)
		}
	}
	if conns["web-4"].nc.IsClosed() {
		t.Fatal("web-4, not named, was disconnected")
	}
	if n, _ := cp.Node("web-4"); n.State == "revoked" {
		t.Fatal("web-4, not named, was revoked")
	}

	// Run again, with one more node: the earlier ones are said to be revoked
	// already, with their time, and counted once.
	counted := cp.Counter("mesh_control_revocations_total")
	r = cp.Ctl("revoke", "web-1", "web-4", "--json")
	res = api.RevokeResult{}
	if err := json.Unmarshal([]byte(r.Stdout), &res); r.Code != 0 || err != nil || len(res.Revoked) != 2 {
		t.Fatalf("revoke web-1 web-4 again (%d, %v): %s", r.Code, err, r.Combined())
	}
	if a := res.Revoked[0].AlreadyRevokedAt; a.IsZero() || time.Since(a) > time.Minute {
		t.Errorf("web-1 revoked again: %+v, want the time of its first revocation", res.Revoked[0])
	}
	if !res.Revoked[1].AlreadyRevokedAt.IsZero() {
		t.Errorf("web-4, revoked now, is said to be revoked already: %+v", res.Revoked[1])
	}
	if got := cp.Counter("mesh_control_revocations_total"); got != counted+1 {
		t.Errorf("mesh_control_revocations_total %v after revoking one new node, want %v", got, counted+1)
	}
	if r := cp.Ctl("revoke", "web-2"); r.Code != 0 || !strings.Contains(r.Stdout, "web-2 was already revoked (key ") || !strings.Contains(r.Stdout, "; at ") {
		t.Errorf("revoke web-2 again (%d): %s", r.Code, r.Combined())
	}
}

// TestAStolenIdentityCannotSpendItsVersions: a host's own credentials report a
// version near 2^64. The control plane drops the report (it is more than
// state.MaxVersionLead past what was declared), so the next declaration is v1, not
// 2^64-5, and after the machine is revoked and enrolled again clean, its
// declarations apply. Before, the report was recorded, the count followed it, and
// a few declarations later wrapped around to v0: the clean machine refused v0, v1,
// … as rolled back while `declare --wait` said converged, until revoked again.
func TestAStolenIdentityCannotSpendItsVersions(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "versions")
	serve := cp.Serve()
	h := harness.NewHost(t, bin, "db-1")
	if r := h.Enrol(cp.Token("db-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	errs := make(chan error, 8)
	nc := nodeConn(t, cp.Dir, h.State, cp.Listen, errs)
	data, _ := json.Marshal(api.Status{V: api.ProtocolVersion, Node: "db-1", HaveApplied: true, AppliedVersion: math.MaxUint64 - 5, KeyringEpoch: 1})
	if err := nc.Publish(api.StatusSubject("db-1"), data); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	serve.WaitOutput(t, "far past the one declared", 10*time.Second)
	body := filepath.Join(t.TempDir(), "b.json")
	writeFile(t, body, `{"files":[{"path":"etc/db.conf","content":"gen 1\n"}]}`)
	if r := cp.Ctl("declare", "--node", "db-1", "--file", body); r.Code != 0 || !strings.Contains(r.Stdout, "declared db-1 v1\n") {
		t.Fatalf("declare after the report: exit %d, want v1:\n%s", r.Code, r.Combined())
	}
	if n, _ := cp.Node("db-1"); n.Declared != 1 || n.Applied != nil {
		t.Fatalf("db-1 after the report: declared v%d, applied %v; want v1 and nothing applied", n.Declared, n.Applied)
	}
	nc.Close()

	// The machine, checked, is revoked and enrolled again clean; it applies what
	// it is declared.
	if r := cp.Ctl("revoke", "db-1"); r.Code != 0 {
		t.Fatalf("revoke: %s", r.Combined())
	}
	clean := harness.NewHost(t, bin, "db-1")
	if r := clean.Enrol(cp.Token("db-1")); r.Code != 0 {
		t.Fatalf("enrol again: %s", r.Combined())
	}
	clean.Run()
	writeFile(t, body, `{"files":[{"path":"etc/db.conf","content":"gen 2\n"}]}`)
	if r := cp.Ctl("declare", "--node", "db-1", "--file", body, "--wait", "30s"); r.Code != 0 {
		t.Fatalf("declare to the clean machine: %s", r.Combined())
	}
	if got, err := clean.ReadManaged("etc/db.conf"); err != nil || got != "gen 2\n" {
		t.Fatalf("the clean machine holds %q, %v", got, err)
	}
}
