package daemon

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"mesh/controlplane/api"
	"mesh/controlplane/authn"
	"mesh/controlplane/state"
	"mesh/declarations"
	"mesh/tokenfmt"
)

// enrolling is a host enrolling into d, as the control plane sees it: a token minted
// through the log, the node key it presents, and the inbox it hears the answers on.
type enrolling struct {
	d       *Daemon
	node    string
	secret  string
	kp      nkeys.KeyPair
	pub     string
	answers *nats.Subscription
}

func newEnrolling(t *testing.T, d *Daemon, node string) *enrolling {
	t.Helper()
	secret := make([]byte, 32)
	rand.Read(secret)
	e := &enrolling{d: d, node: node, secret: hex.EncodeToString(secret)}
	id, _ := authn.SecretID(e.secret)
	res, err := d.raft.Apply(state.Command{Op: state.OpCreateToken, At: d.now().UTC(), CreateToken: &state.CreateTokenCmd{
		ID: id, ProofKey: hex.EncodeToString(e.token().ProofKey()), Node: node, Role: state.RoleWorker, TTL: time.Hour}}, time.Minute)
	if err != nil || res.Err != nil {
		t.Fatalf("mint a token: %v %v", err, res.Err)
	}
	e.kp, _ = nkeys.CreateUser()
	e.pub, _ = e.kp.PublicKey()
	nc, err := nats.Connect("", nats.InProcessServer(d.broker.InProcess()), nats.Token(observerToken))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if e.answers, err = nc.SubscribeSync(api.EnrolInbox(node, e.pub) + ".>"); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return e
}

// token is the token the host holds (its secret).
func (e *enrolling) token() tokenfmt.Token {
	var tok tokenfmt.Token
	b, _ := hex.DecodeString(e.secret)
	copy(tok.Secret[:], b)
	return tok
}

// request is the enrolment request as the host sends it: the token named and its
// secret proved, never sent.
func (e *enrolling) request() api.EnrolRequest {
	var signingKey string
	e.d.fsm.Read(func(s *state.State) { signingKey = s.Keyring.Keys[0] })
	proof, _ := e.kp.Sign(api.KeyProofMessage(e.d.cfg.Mesh, e.node, e.pub))
	id := e.token().SecretHash()
	return api.EnrolRequest{V: api.ProtocolVersion, Mesh: e.d.cfg.Mesh, Node: e.node, Role: state.RoleWorker,
		TokenID: hex.EncodeToString(id[:]), TokenProof: base64.StdEncoding.EncodeToString(e.token().Prove(e.d.cfg.Mesh, e.node, e.pub)),
		PublicKey: e.pub, KeyProof: base64.StdEncoding.EncodeToString(proof),
		CAPin: e.d.cfg.CAPin, SigningKey: signingKey}
}

// ask sends req as the host would and returns the answer that reaches the host's
// inbox, and its size.
func (e *enrolling) ask(t *testing.T, req api.EnrolRequest) (api.EnrolResponse, int) {
	t.Helper()
	data, _ := json.Marshal(req)
	e.d.handleEnrol(&nats.Msg{Subject: api.EnrolKeySubject(e.node, e.pub), Reply: api.EnrolInbox(e.node, e.pub) + ".1", Data: data})
	msg, err := e.answers.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("no enrolment answer reached the host: %v", err)
	}
	var resp api.EnrolResponse
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		t.Fatal(err)
	}
	return resp, len(msg.Data)
}

// enrol enrols as the host would and fails the test on a refusal.
func (e *enrolling) enrol(t *testing.T) (api.EnrolResponse, int) {
	t.Helper()
	resp, n := e.ask(t, e.request())
	if !resp.OK {
		t.Fatalf("enrolment refused: %+v", resp.Error)
	}
	return resp, n
}

// TestATokenAdmitsUntilTheExpiryItsTextSays: the token's text carries its expiry in
// whole seconds, and the record, its mint's time plus the ttl, outlives it by up to a
// second, in which a client that skips the host's own check enrolled past the
// printed expiry (a docs walkthrough). Past the deadline the text says, the login is
// given the refusal's lifetime and the enrolment is refused token_expired; before
// it, the same request enrols.
func TestATokenAdmitsUntilTheExpiryItsTextSays(t *testing.T) {
	d := fleet(t, 0)
	e := newEnrolling(t, d, "web-1")
	id := e.token().SecretHash()
	var tok state.Token
	d.fsm.Read(func(s *state.State) { tok = *s.Tokens[hex.EncodeToString(id[:])] })
	frac := tok.Expiry.Sub(tok.Deadline())
	if frac == 0 {
		t.Skip("the token was minted on a whole second: no window to test (one run in a billion)")
	}
	if auth, ok := d.fsm.TokenByID(hex.EncodeToString(id[:])); !ok || !auth.Expiry.Equal(tok.Deadline()) {
		t.Fatalf("authentication judges the token by %v, want the printed expiry %v", auth.Expiry, tok.Deadline())
	}
	real := d.opts.Now
	d.opts.Now = func() time.Time { return tok.Deadline().Add(frac / 2) }
	resp, _ := e.ask(t, e.request())
	if resp.OK || resp.Error == nil || resp.Error.Code != api.CodeTokenExpired {
		t.Fatalf("an enrolment past the printed expiry, within the record's: %+v, want token_expired", resp)
	}
	d.opts.Now = real
	e.enrol(t)
}

// TestEnrolmentProvesTheSecret (decision 0018): a request names its token and proves
// the secret for the key it registers; a proof made for another key, or another
// token's, admits nothing. An older client's request carrying the secret is still
// read.
func TestEnrolmentProvesTheSecret(t *testing.T) {
	d := fleet(t, 0)
	e, other := newEnrolling(t, d, "web-1"), newEnrolling(t, d, "web-2")
	refused := func(name, code string, mutate func(*api.EnrolRequest)) {
		t.Helper()
		req := e.request()
		mutate(&req)
		resp, _ := e.ask(t, req)
		if resp.OK || resp.Error == nil || resp.Error.Code != code {
			t.Errorf("%s: %+v, want %s", name, resp.Error, code)
		}
	}
	refused("a proof made for another key", api.CodeTokenUnknown, func(r *api.EnrolRequest) {
		r.TokenProof = base64.StdEncoding.EncodeToString(e.token().Prove(d.cfg.Mesh, e.node, other.pub))
	})
	refused("another token's id", api.CodeTokenUnknown, func(r *api.EnrolRequest) {
		id := other.token().SecretHash()
		r.TokenID = hex.EncodeToString(id[:])
	})
	refused("a proof by another token's key", api.CodeTokenUnknown, func(r *api.EnrolRequest) {
		r.TokenProof = base64.StdEncoding.EncodeToString(other.token().Prove(d.cfg.Mesh, e.node, e.pub))
	})
	refused("no proof", api.CodeTokenUnknown, func(r *api.EnrolRequest) { r.TokenProof = "" })
	refused("a token id that is not hex", api.CodeBadRequest, func(r *api.EnrolRequest) { r.TokenID = strings.Repeat("z", 64) })
	refused("a proof that is not base64", api.CodeBadRequest, func(r *api.EnrolRequest) { r.TokenProof = "!!" })
	refused("neither proof nor secret", api.CodeBadRequest, func(r *api.EnrolRequest) { r.TokenID, r.TokenProof = "", "" })
	refused("a host's request carrying a control node's curve key", api.CodeBadRequest, func(r *api.EnrolRequest) {
		curve, _ := nkeys.CreateCurveKeys()
		r.CurveKey, _ = curve.PublicKey()
	})
	d.fsm.Read(func(s *state.State) {
		for _, tok := range s.Tokens {
			if !tok.UsedAt.IsZero() {
				t.Fatalf("a refused request consumed token of %s", tok.Node)
			}
		}
	})
	if resp, _ := e.enrol(t); resp.Node != "web-1" {
		t.Fatalf("enrolled as %q", resp.Node)
	}
	// An agent older than the proof sends the secret.
	req := other.request()
	req.TokenID, req.TokenProof, req.Secret = "", "", other.secret
	if resp, _ := other.ask(t, req); !resp.OK {
		t.Fatalf("an older agent's request: %+v", resp.Error)
	}
}

// TestEnrolmentBudgetIsTheClients: a client holding some other token may publish on
// the node's old enrolment subject, which every client enrolling the node shares, and
// spend its whole budget. The node's own client asks on the subject bound to its key,
// where only it may publish (the broker's grant), and is answered. A request there
// naming another key than the subject's is dropped.
func TestEnrolmentBudgetIsTheClients(t *testing.T) {
	d := fleet(t, 0)
	e := newEnrolling(t, d, "web-1")
	attacker, _ := nkeys.CreateUser()
	attackerPub, _ := attacker.PublicKey()
	for range int(d.guard.budgets.Burst) + 50 {
		d.handleEnrol(&nats.Msg{Subject: api.EnrolSubject("web-1"), Reply: api.EnrolInbox("web-1", attackerPub) + ".1", Data: []byte("{}")})
	}
	before := dropped(d, "enrol", ReasonRate)
	d.handleEnrol(&nats.Msg{Subject: api.EnrolSubject("web-1"), Reply: api.EnrolInbox("web-1", e.pub) + ".1", Data: []byte("{}")})
	if dropped(d, "enrol", ReasonRate) != before+1 {
		t.Fatal("the old subject's budget is not spent; the test shows nothing")
	}
	if resp, _ := e.enrol(t); !resp.OK {
		t.Fatalf("the node's own client was refused after a flood on the shared subject: %+v", resp.Error)
	}

	other := newEnrolling(t, d, "web-2")
	proof, _ := other.kp.Sign(api.KeyProofMessage(d.cfg.Mesh, "web-2", other.pub))
	data, _ := json.Marshal(api.EnrolRequest{V: api.ProtocolVersion, Mesh: d.cfg.Mesh, Node: "web-2", Role: state.RoleWorker,
		Secret: other.secret, PublicKey: other.pub, KeyProof: base64.StdEncoding.EncodeToString(proof), CAPin: d.cfg.CAPin})
	malformed := dropped(d, "enrol", ReasonMalformed)
	d.handleEnrol(&nats.Msg{Subject: api.EnrolKeySubject("web-2", attackerPub), Reply: api.EnrolInbox("web-2", other.pub) + ".1", Data: data})
	if dropped(d, "enrol", ReasonMalformed) != malformed+1 {
		t.Fatal("a request naming another key than its subject's was not dropped")
	}
	if m, err := other.answers.NextMsg(300 * time.Millisecond); err == nil {
		t.Fatalf("a request naming another key than its subject's was answered: %s", m.Data)
	}
}

// TestAProofOnTheOldSubjectIsDropped: on mesh.enrol.<node> nothing says which key
// the publisher proved at login, and a request's proofs are the same every time, so
// anyone holding any token the mesh knows could send there a request read on another
// machine's path and have it carried out (a joining control node's with its own curve
// key). Before, it was: the token was used by the captured key. No client ever sent a
// proof or a curve key there: such a request is dropped as malformed, unanswered,
// before anything is read or written; an older agent's request carrying the secret
// is still served there.
func TestAProofOnTheOldSubjectIsDropped(t *testing.T) {
	d := fleet(t, 0)
	e := newEnrolling(t, d, "web-1")
	curve, _ := nkeys.CreateCurveKeys()
	curvePub, _ := curve.PublicKey()
	for name, mutate := range map[string]func(*api.EnrolRequest){
		"a token proof":                    func(*api.EnrolRequest) {},
		"a token id alone":                 func(r *api.EnrolRequest) { r.TokenProof = "" },
		"a token proof alone":              func(r *api.EnrolRequest) { r.TokenID = "" },
		"a curve key beside an old secret": func(r *api.EnrolRequest) { r.TokenID, r.TokenProof, r.Secret, r.CurveKey = "", "", e.secret, curvePub },
	} {
		req := e.request()
		mutate(&req)
		data, _ := json.Marshal(req)
		before, index := dropped(d, "enrol", ReasonMalformed), lastIndex(d)
		d.handleEnrol(&nats.Msg{Subject: api.EnrolSubject(e.node), Reply: api.EnrolInbox(e.node, e.pub) + ".replay", Data: data})
		if got := dropped(d, "enrol", ReasonMalformed); got != before+1 {
			t.Errorf("%s on the old subject: %d dropped as malformed, want 1", name, got-before)
		}
		if m, err := e.answers.NextMsg(200 * time.Millisecond); err == nil {
			t.Errorf("%s on the old subject was answered: %s", name, m.Data)
		}
		if lastIndex(d) != index {
			t.Errorf("%s on the old subject wrote to the log", name)
		}
	}
	// An agent older than the proof sends its secret there, and is served.
	req := e.request()
	req.TokenID, req.TokenProof, req.Secret = "", "", e.secret
	data, _ := json.Marshal(req)
	d.handleEnrol(&nats.Msg{Subject: api.EnrolSubject(e.node), Reply: api.EnrolInbox(e.node, e.pub) + ".1", Data: data})
	m, err := e.answers.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("an older agent's request on the old subject: %v", err)
	}
	var resp api.EnrolResponse
	if json.Unmarshal(m.Data, &resp); !resp.OK {
		t.Fatalf("an older agent's request on the old subject: %+v", resp.Error)
	}
}

// dropped is how many messages on subject the guard dropped for reason.
func dropped(d *Daemon, subject string, reason Reason) uint64 {
	return d.guard.snapshot().Dropped[DropKey{Subject: subject, Reason: reason}]
}

// lastIndex is the index of the last entry in d's Raft log.
func lastIndex(d *Daemon) uint64 { return d.raft.Status().LastIndex }

// A repeated enrolment (same token, same key, the answer lost) is answered from the
// state: the log already says the token enrolled this key, and a host retrying at its
// budget of 20 a second for the token's hour would otherwise commit an entry each time.
func TestRepeatedEnrolmentCommitsNothing(t *testing.T) {
	d := fleet(t, 0)
	e := newEnrolling(t, d, "web-1")
	before := lastIndex(d)
	first, _ := e.enrol(t)
	if lastIndex(d) != before+1 {
		t.Fatalf("the enrolment appended %d log entries, want 1", lastIndex(d)-before)
	}
	if len(first.Declaration) == 0 || first.Subjects == nil || len(first.Membership) == 0 {
		t.Fatalf("first answer lacks parts: %+v", first)
	}
	before = lastIndex(d)
	applied := d.fsm.AppliedIndex()
	for i := range 5 {
		again, _ := e.enrol(t)
		if string(again.Declaration) != string(first.Declaration) || again.Role != first.Role || string(again.Keyring) != string(first.Keyring) {
			t.Fatalf("repeat %d answered differently:\n%+v\n%+v", i, again, first)
		}
	}
	if n := lastIndex(d) - before; n != 0 {
		t.Fatalf("5 repeats appended %d log entries, want none", n)
	}
	if d.fsm.AppliedIndex() != applied {
		t.Fatalf("the state machine applied %d commands for the repeats, want none", d.fsm.AppliedIndex()-applied)
	}
}

// A node declared more than an answer can carry still gets an answer when it repeats
// its enrolment: without the declaration, which it receives on its declaration
// subject, like every declaration, when it syncs.
func TestRepeatedEnrolmentWithALargeDeclarationIsAnswered(t *testing.T) {
	d := fleet(t, 0)
	e := newEnrolling(t, d, "web-1")
	e.enrol(t)
	body := `{"files":[{"path":"etc/big.conf","content":"` + strings.Repeat("x", 100<<10) + `"}]}`
	res, err := d.declare(api.DeclareRequest{Nodes: []string{"web-1"}, Body: json.RawMessage(body)}, requestCall{})
	if err != nil || len(res.Assignments) != 1 {
		t.Fatalf("declare: %v %+v", err, res)
	}
	again, size := e.enrol(t)
	if size > api.MaxReplySize {
		t.Fatalf("the answer is %d bytes, over the %d a host reads", size, api.MaxReplySize)
	}
	if len(again.Declaration) != 0 {
		t.Fatalf("the answer carries a %d-byte declaration", len(again.Declaration))
	}
	if again.Subjects == nil || len(again.Keyring) == 0 || len(again.Membership) == 0 || again.CAPEM == "" {
		t.Fatalf("the answer lacks what the host needs besides the declaration: %+v", again)
	}

	// The declaration comes the normal way: a sync publishes it on the node's
	// declaration subject, whole and signed for the node's key.
	nc, err := nats.Connect("", nats.InProcessServer(d.broker.InProcess()), nats.Token(observerToken))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	decls, err := nc.SubscribeSync(api.DeclarationSubject("web-1"))
	if err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	sync, _ := json.Marshal(api.SyncRequest{V: api.ProtocolVersion, KeyringEpoch: 1, MembershipVersion: 1 << 20})
	d.handleSync(&nats.Msg{Subject: api.SyncSubject("web-1"), Reply: api.NodeInbox("web-1") + ".1", Data: sync})
	env, err := decls.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("the sync sent no declaration: %v", err)
	}
	var keys []ed25519.PublicKey
	d.fsm.Read(func(s *state.State) {
		for _, k := range s.Keyring.Keys {
			b, _ := hex.DecodeString(k)
			keys = append(keys, b)
		}
	})
	v, err := declarations.VerifyDeclaration(env.Data, keys, declarations.Expect{Mesh: d.cfg.Mesh, Node: "web-1", NodeKey: e.pub,
		KeyringEpoch: 1, Now: d.now()})
	if err != nil || v.Version != res.Assignments[0].Version {
		t.Fatalf("the synced declaration: version %d, %v; want version %d", v.Version, err, res.Assignments[0].Version)
	}
}
