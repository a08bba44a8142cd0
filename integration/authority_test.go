package integration

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"mesh/broker"
	"mesh/controlplane/api"
	"mesh/controlplane/datadir"
	"mesh/controlplane/operator"
	"mesh/controlplane/pki"
	"mesh/integration/harness"
	"mesh/tokenfmt"
)

// The authority model (docs/security.md) tested as a model: for every identity, for
// every subject it may publish on, with every privileged or foreign reply subject,
// nothing changes in the mesh's state and nothing is delivered where it must not be.
// The requester's own inbox is tried too, as the positive control: it is answered.

// rosterDigest is what an attack must not change: every node's key, declared and
// applied versions, revocation, and the keyring.
func rosterDigest(t *testing.T, cp *harness.ControlPlane) string {
	t.Helper()
	var b strings.Builder
	for _, n := range cp.Nodes().Nodes {
		applied := "-"
		if n.Applied != nil {
			applied = fmt.Sprint(*n.Applied)
		}
		fmt.Fprintf(&b, "%s %s %s d%d a%s e%d r%v|", n.ID, n.Role, n.PublicKey, n.Declared, applied, n.KeyringEpoch, !n.RevokedAt.IsZero())
	}
	st := keyringStatus(t, cp)
	fmt.Fprintf(&b, "keyring %d %v", st.Epoch, st.Keys)
	return b.String()
}

// spy counts what reaches a connection's subscriptions.
type spy struct {
	mu   sync.Mutex
	seen []string
}

func (s *spy) watch(t *testing.T, nc *nats.Conn, subjects ...string) {
	t.Helper()
	for _, subj := range subjects {
		sub, err := nc.Subscribe(subj, func(m *nats.Msg) {
			s.mu.Lock()
			s.seen = append(s.seen, m.Subject)
			s.mu.Unlock()
		})
		if err != nil {
			t.Fatal(err)
		}
		sub.SetPendingLimits(-1, -1)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

func (s *spy) got() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.seen)
}

// targets are the reply subjects an attacker might name: every operation of the
// operator API, another node's subjects, the control nodes' subjects, other clients'
// inboxes, nats-server's own requests, and the broker's reserved replies.
func targets(newbieKey string) []string {
	out := []string{
		"mesh.node.victim.decl", "mesh.node.victim.status", "mesh.node.victim.sync",
		"_INBOX.node.victim.hijack", "_INBOX.node.victim.hijack.1",
		"_INBOX.enrol.newbie." + newbieKey + ".hijack",
		"_INBOX.operator", "_INBOX.x.y",
		"mesh.control.cp-1.heartbeat", "mesh.control.kick",
		"mesh.enrol.victim", "mesh.enrol.newbie",
		"$SYS.REQ.SERVER.PING", "$SYS.REQ.SERVER.PING.KICK", "$SYS.REQ.ACCOUNT.PING.CONNZ",
		// A reply the broker reserves for its own service imports: refused by the
		// broker before anything sees it.
		"_R_.ABCDEF.ghijkl",
	}
	for _, op := range api.AdminOps() {
		out = append(out, api.AdminSubject(op))
	}
	return append(out, api.ControlStatusSubject)
}

func TestAuthorityModel(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "authority")
	cp.Serve()
	// The victim runs its agent; a second connection with its own credentials spies
	// on everything the victim can receive.
	victim := harness.NewHost(t, bin, "victim")
	if r := victim.Enrol(cp.Token("victim")); r.Code != 0 {
		t.Fatalf("enrol victim: %s", r.Combined())
	}
	victim.Run()
	cp.WaitConverged("victim", 0, 20*time.Second)
	victimSpy := &spy{}
	victimSpy.watch(t, nodeConn(t, cp.Dir, victim.State, cp.Listen, make(chan error, 64)), "mesh.node.victim.decl", "_INBOX.node.victim.>")

	// The attacker is an enrolled host using its own credentials.
	attackerHost := harness.NewHost(t, bin, "attacker")
	attackerToken := cp.Token("attacker")
	if r := attackerHost.Enrol(attackerToken); r.Code != 0 {
		t.Fatalf("enrol attacker: %s", r.Combined())
	}
	attacker := nodeConn(t, cp.Dir, attackerHost.State, cp.Listen, make(chan error, 64))

	// A machine waiting to enrol with a live token: its inbox must hear nothing of
	// the attacks. A second client holding the same live token attacks.
	newbieTok := parseToken(t, cp.Token("newbie"))
	newbieKey, _ := nkeys.CreateUser()
	newbiePub, _ := newbieKey.PublicKey()
	newbieSpy := &spy{}
	newbieSpy.watch(t, enrollingConn(t, cp, newbieTok, newbieKey), api.EnrolInbox("newbie", newbiePub)+".>")
	liveKey, _ := nkeys.CreateUser()
	livePub, _ := liveKey.PublicKey()
	live := enrollingConn(t, cp, newbieTok, liveKey)

	// A client holding the attacker's used token, and one holding an expired token.
	usedKey, _ := nkeys.CreateUser()
	usedPub, _ := usedKey.PublicKey()
	used := enrollingConn(t, cp, parseToken(t, attackerToken), usedKey)
	expiredText := cp.Token("late", "--ttl", "1s")
	time.Sleep(1100 * time.Millisecond)
	expiredKey, _ := nkeys.CreateUser()
	expiredPub, _ := expiredKey.PublicKey()
	expired := enrollingConn(t, cp, parseToken(t, expiredText), expiredKey)

	// Clients of this version prove their token and bind the nonce signature to the
	// session (decision 0018): one with a live token, one with the expired token.
	proverTok := parseToken(t, cp.Token("prover"))
	proverKey, _ := nkeys.CreateUser()
	proverPub, _ := proverKey.PublicKey()
	prover := provingConn(t, cp, proverTok, proverKey)
	provedLateKey, _ := nkeys.CreateUser()
	provedLatePub, _ := provedLateKey.PublicKey()
	provedLate := provingConn(t, cp, parseToken(t, expiredText), provedLateKey)

	// The operator, with its credentials, asks read-only questions.
	op := cp.OperatorConn()

	// A host revoked while its agent was stopped: its key is let in for a few
	// seconds, in an account of its own, to hear the signed notice (decision 0016).
	goneHost := harness.NewHost(t, bin, "gone")
	if r := goneHost.Enrol(cp.Token("gone")); r.Code != 0 {
		t.Fatalf("enrol gone: %s", r.Combined())
	}
	if r := cp.Ctl("revoke", "gone"); r.Code != 0 {
		t.Fatalf("revoke gone: %s", r.Combined())
	}
	revoked := nodeConn(t, cp.Dir, goneHost.State, cp.Listen, make(chan error, 64))

	before := rosterDigest(t, cp)
	dropsBefore := cp.Counter("mesh_control_messages_dropped_total", "reason=foreign_reply")
	malformedBefore := cp.Counter("mesh_control_messages_dropped_total", "subject=enrol", "reason=malformed")
	adminBefore := cp.Counter("mesh_control_requests_refused_total", "subject=admin") + cp.Counter("mesh_control_messages_dropped_total", "subject=admin")
	heartbeatBefore := cp.Counter("mesh_control_messages_dropped_total", "subject=heartbeat")

	tg := targets(newbiePub)
	enrolRequest := func(tok tokenfmt.Token, kp nkeys.KeyPair, role string) []byte {
		pub, _ := kp.PublicKey()
		sig, _ := kp.Sign(api.KeyProofMessage(tok.Mesh, tok.Node, pub))
		b, _ := json.Marshal(api.EnrolRequest{V: api.ProtocolVersion, Mesh: tok.Mesh, Node: tok.Node, Role: role,
			Secret: hexSecret(tok), PublicKey: pub, KeyProof: base64.StdEncoding.EncodeToString(sig),
			CAPin: hex.EncodeToString(tok.CAPin[:]), SigningKey: hex.EncodeToString(tok.SigningKey)})
		return b
	}
	proofRequest := func(tok tokenfmt.Token, kp nkeys.KeyPair, role string) []byte {
		return proofEnrolRequest(tok, kp, role, "")
	}
	attackerSync, _ := json.Marshal(api.SyncRequest{V: api.ProtocolVersion})
	attackerStatus, _ := json.Marshal(api.Status{V: api.ProtocolVersion, Node: "attacker"})
	readOnly, _ := api.EncodeAdminRequest(api.OpNodes, api.NodesRequest{})
	keyStatus, _ := api.EncodeAdminRequest(api.OpSigningKeyStatus, api.KeyringStatusRequest{})
	controlStatus, _ := api.EncodeAdminRequest(api.OpControlStatus, api.ControlStatusRequest{})

	// A client holding a live token of another node, logged in under the waiting
	// machine's name (admitted for a few seconds, to be told token_other_node).
	otherTok := parseToken(t, cp.Token("other"))
	otherKey, _ := nkeys.CreateUser()
	otherPub, _ := otherKey.PublicKey()
	otherAsNewbie := provingConnAs(t, cp, otherTok, otherKey, "newbie")
	connz := []byte(`{}`)

	type sender struct {
		identity, subject string
		nc                *nats.Conn
		data              []byte
		// dropped: why the control plane drops and counts this request whatever
		// its reply, or for a foreign reply (requests); "" for a status, a publish
		// whose reply is ignored.
		dropped string
	}
	senders := []sender{
		{"enrolled host", "mesh.node.attacker.sync", attacker, attackerSync, "foreign_reply"},
		{"enrolled host", "mesh.node.attacker.status", attacker, attackerStatus, ""},
		{"revoked host", "mesh.node.gone.sync", revoked, attackerSync, "foreign_reply"},
		// A live token: a request that would be refused (wrong role) so the matrix
		// consumes nothing even if a reply were wrongly answered.
		{"enrolling client, live token", "mesh.enrol.newbie", live, enrolRequest(newbieTok, liveKey, "control"), "foreign_reply"},
		{"enrolling client, live token, its key's subject", api.EnrolKeySubject("newbie", livePub), live, enrolRequest(newbieTok, liveKey, "control"), "foreign_reply"},
		{"enrolling client, used token", "mesh.enrol.attacker", used, enrolRequest(parseToken(t, attackerToken), usedKey, "worker"), "foreign_reply"},
		{"enrolling client, used token, its key's subject", api.EnrolKeySubject("attacker", usedPub), used, enrolRequest(parseToken(t, attackerToken), usedKey, "worker"), "foreign_reply"},
		{"enrolling client, expired token", "mesh.enrol.late", expired, enrolRequest(parseToken(t, expiredText), expiredKey, "worker"), "foreign_reply"},
		{"enrolling client proving a live token, its key's subject", api.EnrolKeySubject("prover", proverPub), prover, proofRequest(proverTok, proverKey, "control"), "foreign_reply"},
		// A proof on the old subject, which does not say which key its publisher
		// proved: dropped as malformed, whatever the reply
		// (TestAProofReplayedOnTheOldEnrolmentSubjectIsDropped).
		{"enrolling client proving a live token, old subject", "mesh.enrol.prover", prover, proofRequest(proverTok, proverKey, "control"), "malformed"},
		{"enrolling client proving an expired token, its key's subject", api.EnrolKeySubject("late", provedLatePub), provedLate, proofRequest(parseToken(t, expiredText), provedLateKey, "worker"), "foreign_reply"},
		{"enrolling client proving an expired token, old subject", "mesh.enrol.late", provedLate, proofRequest(parseToken(t, expiredText), provedLateKey, "worker"), "malformed"},
		{"enrolling client, expired token, its key's subject", api.EnrolKeySubject("late", expiredPub), expired, enrolRequest(parseToken(t, expiredText), expiredKey, "worker"), "foreign_reply"},
		{"enrolling client proving another node's token under this node's name, its key's subject", api.EnrolKeySubject("newbie", otherPub), otherAsNewbie, proofRequest(otherTok, otherKey, "worker"), "foreign_reply"},
		// A revoked key's status: nobody listens (its account has no subscriber).
		{"revoked host", "mesh.node.gone.status", revoked, attackerStatus, ""},
		// Monitoring, whose answers (every host's address) are published at the
		// reply named: in the operators' account, where a reply that is the API's
		// subject reaches the API without a reply of its own, and is dropped.
		{"operator", "$SYS.REQ.SERVER.PING.CONNZ", op, connz, ""},
		{"operator", api.AdminSubject(api.OpNodes), op, readOnly, ""},
		{"operator", api.AdminSubject(api.OpSigningKeyStatus), op, keyStatus, ""},
		{"operator", api.AdminSubject(api.OpPing), op, nil, ""},
		{"operator", api.ControlStatusSubject, op, controlStatus, ""},
	}
	expectedDrops, expectedMalformed := 0, 0
	for _, s := range senders {
		for _, reply := range tg {
			if err := s.nc.PublishRequest(s.subject, reply, s.data); err != nil {
				t.Fatalf("%s on %s reply %s: %v", s.identity, s.subject, reply, err)
			}
			switch {
			case strings.HasPrefix(reply, "_R_."): // refused by the broker
			case s.dropped == "foreign_reply":
				expectedDrops++
			case s.dropped == "malformed":
				expectedMalformed++
			}
		}
		if err := s.nc.Flush(); err != nil {
			t.Fatalf("%s: %v", s.identity, err)
		}
	}
	// Each identity's message with its trace (nats-server's Nats-Trace-Dest) aimed at
	// the victim: the broker refuses what the sender may not publish there itself, so
	// no trace of anyone's reaches the victim (its spy below hears nothing).
	for _, s := range senders {
		for _, dest := range []string{"mesh.node.victim.decl", "_INBOX.node.victim.trace"} {
			m := nats.NewMsg(s.subject)
			m.Header.Set("Nats-Trace-Dest", dest)
			m.Data = s.data
			if err := s.nc.PublishMsg(m); err != nil {
				t.Fatalf("%s on %s traced to %s: %v", s.identity, s.subject, dest, err)
			}
		}
		if err := s.nc.Flush(); err != nil {
			t.Fatalf("%s: %v", s.identity, err)
		}
	}
	// Each identity's own inbox, the positive control: answered.
	if m, err := attacker.Request("mesh.node.attacker.sync", attackerSync, 10*time.Second); err != nil {
		t.Fatalf("the attacker's own sync went unanswered: %v", err)
	} else if r, _ := decodeSync(m.Data); r.Error != nil || r.Sent == 0 {
		t.Fatalf("the attacker's own sync answered %+v", r)
	}
	// As an agent holding the mesh's keyring asks: the notice alone (one that
	// holds an older keyring is sent the keyrings after it first).
	revokedSync, _ := json.Marshal(api.SyncRequest{V: api.ProtocolVersion, KeyringEpoch: 1 << 40})
	if m, err := revoked.Request("mesh.node.gone.sync", revokedSync, 5*time.Second); err != nil {
		t.Fatalf("the revoked host's own sync went unanswered: %v", err)
	} else if r, _ := decodeSync(m.Data); r.Error != nil || r.Sent != 1 {
		t.Fatalf("the revoked host's own sync answered %+v, want its one notice", r)
	}
	for _, c := range []struct {
		nc   *nats.Conn
		subj string
		data []byte
		code string
	}{
		{live, "mesh.enrol.newbie", enrolRequest(newbieTok, liveKey, "control"), api.CodeTokenWrongRole},
		{used, "mesh.enrol.attacker", enrolRequest(parseToken(t, attackerToken), usedKey, "worker"), api.CodeTokenUsed},
		{expired, "mesh.enrol.late", enrolRequest(parseToken(t, expiredText), expiredKey, "worker"), api.CodeTokenExpired},
		{prover, api.EnrolKeySubject("prover", proverPub), proofRequest(proverTok, proverKey, "control"), api.CodeTokenWrongRole},
		{provedLate, api.EnrolKeySubject("late", provedLatePub), proofRequest(parseToken(t, expiredText), provedLateKey, "worker"), api.CodeTokenExpired},
	} {
		m, err := c.nc.Request(c.subj, c.data, 10*time.Second)
		if err != nil {
			t.Fatalf("%s on its own inbox: %v", c.subj, err)
		}
		var r api.EnrolResponse
		json.Unmarshal(m.Data, &r)
		if r.OK || r.Error == nil || r.Error.Code != c.code {
			t.Fatalf("%s on its own inbox answered %+v, want %s", c.subj, r.Error, c.code)
		}
	}

	// The subject bound to a key is that key's connection's alone: a client holding
	// the same token under another key may not publish there, so it cannot spend
	// that client's budget.
	squatErrs := make(chan error, 4)
	squatKey, _ := nkeys.CreateUser()
	squatter := enrollingConnWithErrors(t, cp, parseToken(t, attackerToken), squatKey, squatErrs)
	if err := squatter.Publish(api.EnrolKeySubject("attacker", usedPub), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	squatter.Flush()
	select {
	case err := <-squatErrs:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Fatalf("publishing on another key's enrolment subject: %v, want a permissions violation", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a client published on another key's enrolment subject")
	}

	harness.Eventually(t, 10*time.Second, fmt.Sprintf("%d foreign replies dropped and counted", expectedDrops), func() bool {
		return cp.Counter("mesh_control_messages_dropped_total", "reason=foreign_reply") >= dropsBefore+float64(expectedDrops)
	})
	time.Sleep(time.Second) // anything misdelivered has arrived by now
	if got := cp.Counter("mesh_control_messages_dropped_total", "reason=foreign_reply"); got != dropsBefore+float64(expectedDrops) {
		t.Errorf("%v foreign replies counted, want exactly %d", got-dropsBefore, expectedDrops)
	}
	if got := cp.Counter("mesh_control_messages_dropped_total", "subject=enrol", "reason=malformed"); got != malformedBefore+float64(expectedMalformed) {
		t.Errorf("%v enrolment requests counted as malformed, want exactly %d", got-malformedBefore, expectedMalformed)
	}
	if seen := victimSpy.got(); len(seen) != 0 {
		t.Errorf("the victim received %d messages it was not sent: %v", len(seen), seen)
	}
	if seen := newbieSpy.got(); len(seen) != 0 {
		t.Errorf("the waiting enrolment's inbox received %v", seen)
	}
	// Nothing of the hosts' and enrolling clients' attempts reached the operator API or
	// the control nodes' subjects; the operator's reflections reach only the operator
	// API, whose strict requests make nothing of another call's answer.
	if got := cp.Counter("mesh_control_messages_dropped_total", "subject=heartbeat"); got != heartbeatBefore {
		t.Errorf("%v messages reached the control nodes' heartbeat subject", got-heartbeatBefore)
	}
	if after := rosterDigest(t, cp); after != before {
		t.Fatalf("the mesh's state changed:\nbefore %s\nafter  %s", before, after)
	}
	t.Logf("%d senders x %d reply subjects; %d foreign replies dropped; operator API refusals meanwhile: %v",
		len(senders), len(tg), expectedDrops,
		cp.Counter("mesh_control_requests_refused_total", "subject=admin")+cp.Counter("mesh_control_messages_dropped_total", "subject=admin")-adminBefore)

	// A removed control node's operator credentials: each read they may send, with
	// every reply subject above and an active operator's inbox, is answered in their
	// own account or not at all. Nothing reaches the victim, the waiting enrolment or
	// the operator, and nothing changes.
	cp2 := joinControl(t, cp, "cp-2")
	if r := cp.Ctl("control", "remove", "cp-2"); r.Code != 0 {
		t.Fatalf("control remove cp-2: %s", r.Combined())
	}
	cp2.Process().Wait(30 * time.Second)
	// The hosts were told of the broker added and of the one removed, on their
	// declaration subjects: the victim's spy heard both, before any of the reads.
	harness.Eventually(t, 10*time.Second, "the victim told of both membership changes", func() bool { return len(victimSpy.got()) >= 2 })
	time.Sleep(500 * time.Millisecond)
	victimHeard := len(victimSpy.got())
	before = rosterDigest(t, cp)
	cfg, _ := datadir.Dir(cp.Dir).LoadConfig()
	pin, _ := cfg.Pin()
	retired, err := nats.Connect("tls://"+cp.Listen, operator.CredsLogin(filepath.Join(cp2.Dir, datadir.AdminCredsFile), pki.PinnedClientConfig(pin), 10*time.Second)...)
	if err != nil {
		t.Fatalf("the removed node's credentials: %v", err)
	}
	defer retired.Close()
	opSpy := &spy{}
	opSpy.watch(t, cp.OperatorConn(), api.OperatorInboxPrefix+"WATCH.>")
	reads := 0
	for _, op := range api.AdminOps() {
		if !api.ReadOnly(op) {
			continue
		}
		req, _ := api.EncodeAdminRequest(op, struct{}{})
		for _, reply := range append(tg, api.OperatorInboxPrefix+"WATCH.x") {
			if err := retired.PublishRequest(api.AdminSubject(op), reply, req); err != nil {
				t.Fatalf("a removed node's %s with reply %s: %v", op, reply, err)
			}
			reads++
		}
	}
	if err := retired.Flush(); err != nil {
		t.Fatal(err)
	}
	// Its own inbox, the positive control: answered.
	if _, err := operator.NewClient(retired, 10*time.Second).Nodes(api.NodesRequest{}); err != nil {
		t.Fatalf("the removed node's own read: %v", err)
	}
	time.Sleep(time.Second)
	if seen := victimSpy.got()[victimHeard:]; len(seen) != 0 {
		t.Errorf("the victim received %v from a removed node's credentials", seen)
	}
	for who, s := range map[string]*spy{"the waiting enrolment": newbieSpy, "an operator": opSpy} {
		if seen := s.got(); len(seen) != 0 {
			t.Errorf("%s received %v from a removed node's credentials", who, seen)
		}
	}
	if after := rosterDigest(t, cp); after != before {
		t.Fatalf("the mesh's state changed under a removed node's reads:\nbefore %s\nafter  %s", before, after)
	}
	t.Logf("a removed node's credentials: %d reads with foreign replies", reads)

	// The live token still enrols its machine, which the attacks did not consume.
	newbie := harness.NewHost(t, bin, "newbie")
	if r := newbie.Enrol(tokenText(newbieTok)); r.Code != 0 {
		t.Fatalf("the live token after the attacks: %s", r.Combined())
	}
}

// TestAProofReplayedOnTheOldEnrolmentSubjectIsDropped: the old enrolment subject
// mesh.enrol.<node> does not say which key its publisher proved at login, and the
// proofs a request carries are the same every time they are made. Anyone holding a
// token of the victim's node the mesh refuses (cancelled, used, expired: admitted
// for a few seconds, to be told why) sends there a request read on the victim's
// path (a removed control node's leaf, relaying it: decision 0018). Before,
// the mesh carried it out: the worker's token was bound to the key of the request
// and its machine then refused (token_used); a joining control node's request, sent
// with the attacker's curve key, had the mesh's signing key sealed to that curve key
// and the real join refused, its token spent. No client ever sent a proof, or a curve
// key, on the old subject: such a request is dropped there, counted as malformed, and
// the victims then enrol and join.
func TestAProofReplayedOnTheOldEnrolmentSubjectIsDropped(t *testing.T) {
	t.Parallel()
	cp := harness.NewControlPlane(t, bin, "oldsubject")
	cp.Serve()
	otherTok := parseToken(t, cp.Token("x1"))
	malformed := func() float64 {
		return cp.Counter("mesh_control_messages_dropped_total", "subject=enrol", "reason=malformed")
	}
	replay := func(node string, held tokenfmt.Token, captured []byte, capturedKey string) {
		t.Helper()
		// A token of another node, under the victim's name, may not publish
		// there at all (it was: any token the mesh knows could).
		ko, _ := nkeys.CreateUser()
		other := provingConnAs(t, cp, otherTok, ko, node)
		violation := make(chan error, 1)
		other.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case violation <- err:
			default:
			}
		})
		if err := other.PublishRequest(api.EnrolSubject(node), api.EnrolInbox(node, capturedKey)+".replay", captured); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-violation:
			if !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
				t.Fatalf("another node's token publishing on %s's old subject: %v, want a permissions violation", node, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("another node's token published on %s's old subject without a permissions violation", node)
		}
		ka, _ := nkeys.CreateUser()
		attacker := provingConnAs(t, cp, held, ka, node)
		before := malformed()
		if err := attacker.PublishRequest(api.EnrolSubject(node), api.EnrolInbox(node, capturedKey)+".replay", captured); err != nil {
			t.Fatal(err)
		}
		if err := attacker.Flush(); err != nil {
			t.Fatal(err)
		}
		harness.Eventually(t, 10*time.Second, "the replayed request for "+node+" dropped as malformed", func() bool { return malformed() == before+1 })
	}

	// A worker's request; the attacker holds the node's token the victim's replaced.
	held := parseToken(t, cp.Token("n1"))
	victimTok := parseToken(t, cp.Token("n1", "--replace"))
	kv, _ := nkeys.CreateUser()
	kvPub, _ := kv.PublicKey()
	replay("n1", held, proofEnrolRequest(victimTok, kv, "worker", ""), kvPub)
	if n, ok := cp.Node("n1"); ok {
		t.Fatalf("a replayed request on the old subject enrolled n1 with key %s (the captured key: %v)", n.PublicKey, n.PublicKey == kvPub)
	}
	victim := harness.NewHost(t, bin, "n1")
	if r := victim.Enrol(tokenText(victimTok)); r.Code != 0 {
		t.Fatalf("the machine the token was minted for, after the replay: %s", r.Combined())
	}

	// A joining control node's, with the attacker's curve key in place of the
	// joiner's; the attacker holds the node's control token cancelled before.
	heldText, _ := cp.ControlToken("cp-2")
	if r := cp.Ctl("token", "cancel", "cp-2"); r.Code != 0 {
		t.Fatalf("token cancel cp-2: %s", r.Combined())
	}
	ctlText, joiner := cp.ControlToken("cp-2")
	kj, _ := nkeys.CreateUser()
	kjPub, _ := kj.PublicKey()
	curve, _ := nkeys.CreateCurveKeys()
	curvePub, _ := curve.PublicKey()
	replay("cp-2", parseToken(t, heldText), proofEnrolRequest(parseToken(t, ctlText), kj, "control", curvePub), kjPub)
	if r := joiner.Join(ctlText); r.Code != 0 {
		t.Fatalf("the join the control token was minted for, after the replay (exit %d):\n%s", r.Code, r.Combined())
	}
}

// TestAConnectionAdmittedBeforeItsTokenIsCancelledIsRefused: an operator cancels a
// token sent to the wrong place (meshctl token cancel) while a client holding it is
// already logged in: the broker re-checks no connection when the token is
// cancelled, and the grant lasts up to 30 s. The connection can still ask, and is
// refused token_cancelled on its key's subject and on the old one alike (with the
// secret, as an older agent asks there): the enrolment handler decides through the
// state, not the login, so the token enrols nothing once the cancellation has
// committed. The matrix had no cancelled token among its senders.
func TestAConnectionAdmittedBeforeItsTokenIsCancelledIsRefused(t *testing.T) {
	t.Parallel()
	cp := harness.NewControlPlane(t, bin, "cancelled")
	cp.Serve()
	tok := parseToken(t, cp.Token("c1"))
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	prover := provingConn(t, cp, tok, kp)
	if r := cp.Ctl("token", "cancel", "c1"); r.Code != 0 {
		t.Fatalf("token cancel c1: %s", r.Combined())
	}
	sig, _ := kp.Sign(api.KeyProofMessage(tok.Mesh, tok.Node, pub))
	withSecret, _ := json.Marshal(api.EnrolRequest{V: api.ProtocolVersion, Mesh: tok.Mesh, Node: tok.Node, Role: "worker",
		Secret: hexSecret(tok), PublicKey: pub, KeyProof: base64.StdEncoding.EncodeToString(sig),
		CAPin: hex.EncodeToString(tok.CAPin[:]), SigningKey: hex.EncodeToString(tok.SigningKey)})
	for _, c := range []struct {
		subject string
		data    []byte
	}{
		{api.EnrolKeySubject("c1", pub), proofEnrolRequest(tok, kp, "worker", "")},
		{api.EnrolSubject("c1"), withSecret},
	} {
		m, err := prover.Request(c.subject, c.data, 10*time.Second)
		if err != nil {
			t.Fatalf("a request on %s from a connection admitted before the cancellation: %v", c.subject, err)
		}
		var r api.EnrolResponse
		json.Unmarshal(m.Data, &r)
		if r.OK || r.Error == nil || r.Error.Code != api.CodeTokenCancelled {
			t.Fatalf("a request on %s from a connection admitted before the cancellation answered %+v, want %s", c.subject, r.Error, api.CodeTokenCancelled)
		}
	}
	if n, ok := cp.Node("c1"); ok {
		t.Fatalf("a cancelled token enrolled c1 with key %s", n.PublicKey)
	}
	if got := cp.Counter("mesh_control_requests_refused_total", "subject=enrol", "reason="+api.CodeTokenCancelled); got != 2 {
		t.Errorf("%v refusals counted as token_cancelled, want 2", got)
	}
}

// TestTokenAdmitsOneMachineOnce: the broker admits a token's connections only under
// its own node, at most a few at once; the enrolment reply reaches only the
// connection that asked; a revoked node gets nowhere, with its key or its old token.
func TestTokenAdmitsOneMachineOnce(t *testing.T) {
	t.Parallel()
	cp := harness.NewControlPlane(t, bin, "onetoken")
	cp.Serve()
	cfg, _ := datadir.Dir(cp.Dir).LoadConfig()
	pin, _ := cfg.Pin()
	tok := parseToken(t, cp.Token("web-1"))

	// Concurrent connections on one token: at most three are admitted.
	var admitted, refused atomic.Int32
	var wg sync.WaitGroup
	var conns []*nats.Conn
	var mu sync.Mutex
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			kp, _ := nkeys.CreateUser()
			pub, _ := kp.PublicKey()
			nc, err := nats.Connect("tls://"+cp.Listen, nats.Secure(pki.PinnedClientConfig(pin)), nats.TLSHandshakeFirst(),
				nats.UserInfo("enrol:web-1", hexSecret(tok)), nats.Nkey(pub, kp.Sign), nats.NoReconnect())
			if err != nil {
				refused.Add(1)
				return
			}
			admitted.Add(1)
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if admitted.Load() != 3 || refused.Load() != 17 {
		t.Fatalf("20 concurrent connections on one token: %d admitted, %d refused; want 3 and 17", admitted.Load(), refused.Load())
	}
	for _, nc := range conns {
		nc.Close()
	}

	// A token under another node's name: admitted briefly, only to be told, on its
	// key's subject; the node's old subject, whose budget web-2's enrolments share,
	// is not its to publish on.
	otherTok := parseToken(t, cp.Token("web-9"))
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	violation := make(chan error, 1)
	nc, err := nats.Connect("tls://"+cp.Listen, nats.Secure(pki.PinnedClientConfig(pin)), nats.TLSHandshakeFirst(),
		nats.UserInfo("enrol:web-2", hexSecret(otherTok)), nats.Nkey(pub, kp.Sign), nats.CustomInboxPrefix(api.EnrolInbox("web-2", pub)), nats.NoReconnect(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case violation <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatalf("another node's name: %v", err)
	}
	sig, _ := kp.Sign(api.KeyProofMessage(otherTok.Mesh, "web-2", pub))
	req, _ := json.Marshal(api.EnrolRequest{V: api.ProtocolVersion, Mesh: otherTok.Mesh, Node: "web-2", Role: "worker", Secret: hexSecret(otherTok),
		PublicKey: pub, KeyProof: base64.StdEncoding.EncodeToString(sig), CAPin: hex.EncodeToString(otherTok.CAPin[:]), SigningKey: hex.EncodeToString(otherTok.SigningKey)})
	if err := nc.Publish("mesh.enrol.web-2", req); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-violation:
		if !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
			t.Fatalf("another node's token on web-2's old subject: %v, want a permissions violation", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("another node's token published on web-2's old subject without a permissions violation")
	}
	m, err := nc.Request(api.EnrolKeySubject("web-2", pub), req, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var r api.EnrolResponse
	json.Unmarshal(m.Data, &r)
	if r.OK || r.Error == nil || r.Error.Code != api.CodeTokenOtherNode {
		t.Fatalf("another node's name answered %+v", r.Error)
	}
	// ...and the connection ends within the short refusal lifetime.
	harness.Eventually(t, 10*time.Second, "the refused token's connection closes", func() bool { return nc.IsClosed() })

	// Two machines holding the same live token: the second cannot read the first's
	// answer, and the first's enrolment completes.
	tok = parseToken(t, cp.Token("web-5"))
	first := harness.NewHost(t, bin, "web-5")
	otherKey, _ := nkeys.CreateUser()
	errs := make(chan error, 4)
	snoop := enrollingConnWithErrors(t, cp, tok, otherKey, errs)
	firstPending := first.PendingKey(t, tokenText(tok))
	snoop.SubscribeSync(api.EnrolInbox("web-5", firstPending) + ".>")
	snoop.Flush()
	select {
	case err := <-errs:
		if !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
			t.Fatalf("subscribing to another client's enrolment inbox: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the broker let one client subscribe to another's enrolment inbox")
	}
	if r := first.Enrol(tokenText(tok)); r.Code != 0 {
		t.Fatalf("the first machine's enrolment: %s", r.Combined())
	}
	if first.PublicKey() != firstPending {
		t.Fatal("the enrolment did not use the key prepared for it")
	}

	// Revoked: the node's key is let in only to ask for its state and hear its
	// signed notice (decision 0016): another node's subject is a permissions
	// violation. Its old token gets no connection.
	if r := cp.Ctl("revoke", "web-5"); r.Code != 0 {
		t.Fatalf("revoke: %s", r.Combined())
	}
	revokedPub, _ := first.KeyPair(t).PublicKey()
	violations := make(chan error, 4)
	revoked, err := nats.Connect("tls://"+cp.Listen, nats.Secure(pki.PinnedClientConfig(pin)), nats.TLSHandshakeFirst(),
		nats.Nkey(revokedPub, first.KeyPair(t).Sign), nats.NoReconnect(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
	if err != nil {
		t.Fatalf("the revoked node's key was not let in to hear its notice: %v", err)
	}
	defer revoked.Close()
	if err := revoked.Publish(api.SyncSubject("web-1"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	revoked.Flush()
	select {
	case err := <-violations:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Fatalf("the revoked key on another node's subject: %v, want a permissions violation", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the revoked node's key may publish on another node's subject")
	}
	id := first.PublicKey()
	idKey := first.KeyPair(t)
	_, err = nats.Connect("tls://"+cp.Listen, nats.Secure(pki.PinnedClientConfig(pin)), nats.TLSHandshakeFirst(),
		nats.UserInfo("enrol:web-5", hexSecret(tok)), nats.Nkey(id, idKey.Sign), nats.NoReconnect())
	if err == nil {
		t.Fatal("the revoked node's key was admitted with its old token")
	}
}

// provingConn is the connection of an enrolling client of this version: it proves
// tok's secret for kp rather than sending it, and kp signs the nonce bound to the TLS
// session (decision 0018).
func provingConn(t *testing.T, cp *harness.ControlPlane, tok tokenfmt.Token, kp nkeys.KeyPair) *nats.Conn {
	t.Helper()
	return provingConnAs(t, cp, tok, kp, tok.Node)
}

// provingConnAs is provingConn logged in under the node name as, which need not be
// tok's: the broker admits a token the mesh knows under another node's name for a
// few seconds, so that the client is told token_other_node.
func provingConnAs(t *testing.T, cp *harness.ControlPlane, tok tokenfmt.Token, kp nkeys.KeyPair, as string) *nats.Conn {
	t.Helper()
	cfg, _ := datadir.Dir(cp.Dir).LoadConfig()
	pin, _ := cfg.Pin()
	pub, _ := kp.PublicKey()
	id := tok.SecretHash()
	d := &broker.BoundDialer{TLS: pki.PinnedClientConfig(pin)}
	nc, err := nats.Connect("tls://"+cp.Listen, nats.SetCustomDialer(d), nats.TLSHandshakeFirst(),
		nats.UserInfo("enrol:"+as, api.EnrolPassword(hex.EncodeToString(id[:]), tok.Prove(tok.Mesh, as, pub))),
		nats.Nkey(pub, d.Sign(kp.Sign)), nats.CustomInboxPrefix(api.EnrolInbox(as, pub)), nats.NoReconnect())
	if err != nil {
		t.Fatalf("proving connection as enrol:%s: %v", as, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// proofEnrolRequest is the enrolment request of this version's clients for tok's
// node and the key kp (meshhost's, or meshctl join's with curveKey): the token
// proved, never sent.
func proofEnrolRequest(tok tokenfmt.Token, kp nkeys.KeyPair, role, curveKey string) []byte {
	pub, _ := kp.PublicKey()
	sig, _ := kp.Sign(api.KeyProofMessage(tok.Mesh, tok.Node, pub))
	id := tok.SecretHash()
	b, _ := json.Marshal(api.EnrolRequest{V: api.ProtocolVersion, Mesh: tok.Mesh, Node: tok.Node, Role: role,
		TokenID: hex.EncodeToString(id[:]), TokenProof: base64.StdEncoding.EncodeToString(tok.Prove(tok.Mesh, tok.Node, pub)),
		PublicKey: pub, KeyProof: base64.StdEncoding.EncodeToString(sig),
		CAPin: hex.EncodeToString(tok.CAPin[:]), SigningKey: hex.EncodeToString(tok.SigningKey), CurveKey: curveKey})
	return b
}

// enrollingConnWithErrors is enrollingConn that also hands the connection's
// asynchronous errors (permission violations) to errs, if not nil.
func enrollingConnWithErrors(t *testing.T, cp *harness.ControlPlane, tok tokenfmt.Token, kp nkeys.KeyPair, errs chan error) *nats.Conn {
	t.Helper()
	cfg, _ := datadir.Dir(cp.Dir).LoadConfig()
	pin, _ := cfg.Pin()
	pub, _ := kp.PublicKey()
	nc, err := nats.Connect("tls://"+cp.Listen, nats.Secure(pki.PinnedClientConfig(pin)), nats.TLSHandshakeFirst(),
		nats.UserInfo("enrol:"+tok.Node, hexSecret(tok)), nats.Nkey(pub, kp.Sign), nats.CustomInboxPrefix(api.EnrolInbox(tok.Node, pub)), nats.NoReconnect(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatalf("enrolling connection: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func parseToken(t *testing.T, text string) tokenfmt.Token {
	t.Helper()
	tok, err := tokenfmt.Parse(strings.TrimSpace(text), time.Now().Add(-time.Minute))
	if err != nil {
		t.Fatalf("parse token: %v", err)
	}
	return tok
}

func tokenText(tok tokenfmt.Token) string { return tok.Encode() }

func decodeSync(data []byte) (api.SyncResponse, error) {
	var r api.SyncResponse
	err := json.Unmarshal(data, &r)
	return r, err
}

func dialNode(t *testing.T, kp nkeys.KeyPair, pin [32]byte, addr string) (*nats.Conn, error) {
	t.Helper()
	pub, _ := kp.PublicKey()
	return nats.Connect("tls://"+addr, nats.Secure(pki.PinnedClientConfig(pin)), nats.TLSHandshakeFirst(), nats.Nkey(pub, kp.Sign), nats.NoReconnect())
}
