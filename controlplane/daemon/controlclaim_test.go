package daemon

import (
	"crypto"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"mesh/controlplane/api"
	"mesh/controlplane/pki"
	"mesh/controlplane/state"
)

// TestControlTokenNeedsTheCA: operator credentials are on every control node, and a
// control token hands its holder the signing key, so the control plane records a
// control token only with the mesh CA's signature over it, and records the pin and
// operator key the CA vouched for. Without it, or with another CA's, or with a claim
// changed after signing, the answer is not_ca_holder and nothing is recorded. The
// claim covers the token's proof key and sealed identity: one taken from the CA
// holder's request (an on-path relay, say) admits nobody but the holder of that
// token's secret. An expired claim, or an older meshctl's (which covered neither),
// is refused as a bad request, nothing recorded.
func TestControlTokenNeedsTheCA(t *testing.T) {
	d := fleet(t, 0)
	ca, err := d.opts.Dir.LoadCA()
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := pki.NewCA("bench", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	newReq := func() api.TokenCreateRequest { return controlTokenRequest("cp-2", 2, d.now().Add(time.Hour)) }
	sign := func(ca *pki.CA, r api.TokenCreateRequest) []byte { return signClaim(t, ca, d.cfg.Mesh, r) }

	refused := map[string]api.TokenCreateRequest{}
	r := newReq()
	refused["no proof"] = r
	r = newReq()
	r.Control.Proof = sign(other, r)
	refused["another CA's proof"] = r
	r = newReq()
	r.Control.Proof = sign(ca, r)
	r.Control.Broker = "127.0.0.9:7300"
	refused["an address changed after signing"] = r
	r = newReq()
	r.Control.Proof = sign(ca, r)
	r.Node = "cp-9"
	refused["another node than signed for"] = r
	r = newReq()
	r.Control.Pin = "not hex"
	r.Control.Proof = sign(ca, r)
	refused["no pin"] = r
	r = newReq()
	r.Control.Operator = "not a key"
	r.Control.Proof = sign(ca, r)
	refused["no operator key"] = r
	r = newReq()
	r.Control.Proof = sign(ca, r)
	r.ProofKey = newReq().ProofKey
	refused["the claim with another proof key"] = r
	r = newReq()
	r.Control.Proof = sign(ca, r)
	r.Sealed = []byte("sealed to the taker")
	refused["the claim with another sealed identity"] = r
	r = newReq()
	r.Control.Proof = sign(ca, r)
	r.Control.ClaimExpiry = r.Control.ClaimExpiry.Add(time.Hour)
	refused["the claim with a later expiry"] = r

	badRequests := map[string]api.TokenCreateRequest{}
	r = newReq()
	r.Control.ClaimExpiry = d.now().Add(-state.StampAheadTolerance - time.Second).Truncate(time.Second)
	r.Control.Proof = sign(ca, r)
	badRequests["an expired claim"] = r
	r = newReq()
	r.Control.ClaimExpiry = d.now().Add(25 * time.Hour).Truncate(time.Second)
	r.Control.Proof = sign(ca, r)
	badRequests["a claim of a CA holder a day ahead"] = r
	r = newReq()
	r.Control.ClaimExpiry = time.Time{}
	r.Control.Proof = signV1(t, ca, d.cfg.Mesh, r)
	badRequests["an older meshctl's claim"] = r

	for name, req := range refused {
		_, err := d.createToken(req)
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Code != api.CodeNotCAHolder {
			t.Errorf("%s: %v, want %s", name, err, api.CodeNotCAHolder)
		}
	}
	for name, req := range badRequests {
		_, err := d.createToken(req)
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Code != api.CodeBadRequest || !strings.Contains(ae.Message, "nothing was minted") {
			t.Errorf("%s: %v, want %s saying nothing was minted", name, err, api.CodeBadRequest)
		}
	}
	d.fsm.Read(func(s *state.State) {
		for name, reqs := range map[string]map[string]api.TokenCreateRequest{"not_ca_holder": refused, "bad_request": badRequests} {
			for what, req := range reqs {
				if _, ok := s.Tokens[req.ID]; ok {
					t.Errorf("%s (%s): the token was recorded", what, name)
				}
			}
		}
	})

	// Clocks a few minutes apart: the claim ends a little after the ttl, or ended
	// a little before this node's clock, by the CA holder's.
	for name, expiry := range map[string]time.Time{
		"a CA holder 4 minutes ahead":           d.now().Add(time.Hour + 4*time.Minute),
		"a CA holder 64 minutes behind, ttl 1h": d.now().Add(-4 * time.Minute),
	} {
		r := newReq()
		r.Node = "cp-7"
		r.Control.ClaimExpiry = expiry.Truncate(time.Second)
		r.Control.Proof = sign(ca, r)
		if _, err := d.createToken(r); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if _, err := d.cancelTokens(api.TokenCancelRequest{Node: "cp-7"}); err != nil {
			t.Fatal(err)
		}
	}

	good := newReq()
	good.Control.Proof = sign(ca, good)
	if _, err := d.createToken(good); err != nil {
		t.Fatalf("a control token the CA signed: %v", err)
	}
	d.fsm.Read(func(s *state.State) {
		tk := s.Tokens[good.ID]
		if tk == nil || tk.Control.Pin != good.Control.Pin || tk.Control.Operator != good.Control.Operator || tk.ProofKey != good.ProofKey {
			t.Fatalf("recorded token %+v: the pin, operator key and proof key are not those the CA signed", tk)
		}
	})
}

// TestAControlTokenSentAgainAfterItsClaimExpired (a review): meshctl sends a
// token.create again when its answer was lost; sent after the claim expired, it
// was refused "nothing was minted" although the token was recorded and pending.
// While the token is pending the same request is answered with it; once the token
// is no longer pending (expired, its record about to be purged) the request is
// judged as a new one, and its expired claim refused: the purge at its commit
// would otherwise let it register the id again.
func TestAControlTokenSentAgainAfterItsClaimExpired(t *testing.T) {
	d := fleet(t, 0)
	ca, err := d.opts.Dir.LoadCA()
	if err != nil {
		t.Fatal(err)
	}
	// A CA holder 50 minutes behind: the claim ends 10 minutes from now, the
	// token an hour from now.
	req := controlTokenRequest("cp-2", 2, d.now().Add(10*time.Minute))
	req.Control.Proof = signClaim(t, ca, d.cfg.Mesh, req)
	first, err := d.createToken(req)
	if err != nil {
		t.Fatalf("minted: %v", err)
	}
	d.opts.Now = func() time.Time { return time.Now().Add(20 * time.Minute) }
	again, err := d.createToken(req)
	if err != nil || !again.Expiry.Equal(first.Expiry) {
		t.Fatalf("sent again 20 minutes later, the claim expired, the token pending: %+v, %v; want the token minted, expiry %s", again, err, first.Expiry)
	}
	d.opts.Now = func() time.Time { return time.Now().Add(25 * time.Hour) }
	var ae *api.Error
	if _, err := d.createToken(req); !errors.As(err, &ae) || ae.Code != api.CodeBadRequest || !strings.Contains(ae.Message, "expired") {
		t.Fatalf("sent again once the token expired: %v, want bad_request, the claim expired", err)
	}
}

// controlTokenRequest is a control token's creation for node at 127.0.0.N (its
// broker, Raft and cluster ports 7300-7302), with a new id and proof key and an
// operator key of its own, its claim ending at claimExpiry; Proof is not set
// (signClaim).
func controlTokenRequest(node string, n int, claimExpiry time.Time) api.TokenCreateRequest {
	var id, key [32]byte
	rand.Read(id[:])
	rand.Read(key[:])
	user, _ := nkeys.CreateUser()
	operatorKey, _ := user.PublicKey()
	host := fmt.Sprintf("127.0.0.%d", n)
	return api.TokenCreateRequest{ID: hex.EncodeToString(id[:]), ProofKey: hex.EncodeToString(key[:]), Node: node, Role: state.RoleControl, TTL: api.Duration(time.Hour),
		Control: &api.ControlMember{Broker: host + ":7300", Raft: host + ":7301", Cluster: host + ":7302",
			Pin: hex.EncodeToString(make([]byte, 32)), Operator: operatorKey, ClaimExpiry: claimExpiry.Truncate(time.Second)},
		Sealed: []byte("sealed")}
}

// signClaim is ca's signature over r's claim in mesh.
func signClaim(t *testing.T, ca *pki.CA, mesh string, r api.TokenCreateRequest) []byte {
	t.Helper()
	sig, err := ca.SignControlClaim(r.ControlClaim(mesh))
	if err != nil {
		t.Fatal(err)
	}
	return sig
}

// signV1 signs r's claim as a meshctl before claim version 2 did: no proof key,
// sealed identity or expiry.
func signV1(t *testing.T, ca *pki.CA, mesh string, r api.TokenCreateRequest) []byte {
	t.Helper()
	c := r.Control
	h := sha256.New()
	for _, f := range []string{"mesh control token claim v1", mesh, r.ID, r.Node, c.Broker, c.Raft, c.Cluster, c.Pin, c.Operator} {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	sig, err := ca.Key.Sign(rand.Reader, h.Sum(nil), crypto.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	return sig
}

// TestFirstControlNodeRecordsItsIdentity: the bootstrap node's record carries the pin
// of its TLS key and its operator key from the first command on, so that a mesh made
// from now on checks routes and Raft connections against pins from the start.
func TestFirstControlNodeRecordsItsIdentity(t *testing.T) {
	d := fleet(t, 0)
	pin, operatorKey, err := d.identityKeys()
	if err != nil {
		t.Fatal(err)
	}
	d.fsm.Read(func(s *state.State) {
		cn := s.ControlNodes[d.cfg.Node]
		if cn == nil || cn.Pin != pin || cn.Operator != operatorKey || len(pin) != 64 {
			t.Fatalf("first control node %+v; want pin %s and operator %s", cn, pin, operatorKey)
		}
		if pins, unpinned := s.ControlPins(); len(pins) != 1 || len(unpinned) != 0 {
			t.Fatalf("pins %v, unpinned %v", pins, unpinned)
		}
	})
}

// TestTokenCreateNeedsAProofKey: a token whose proof key is missing or malformed (an
// older meshctl) is refused, not recorded: no current agent could enrol with it.
func TestTokenCreateNeedsAProofKey(t *testing.T) {
	d := fleet(t, 0)
	var id [32]byte
	rand.Read(id[:])
	req := api.TokenCreateRequest{ID: hex.EncodeToString(id[:]), Node: "web-1", Role: state.RoleWorker, TTL: api.Duration(time.Hour)}
	for name, key := range map[string]string{"missing": "", "short": "abcd", "not hex": string(make([]byte, 64)), "too long": hex.EncodeToString(make([]byte, 33))} {
		req.ProofKey = key
		_, err := d.createToken(req)
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Code != api.CodeBadRequest {
			t.Errorf("%s proof key: %v, want %s", name, err, api.CodeBadRequest)
		}
	}
	d.fsm.Read(func(s *state.State) {
		if len(s.Tokens) != 0 {
			t.Errorf("a token without a proof key was recorded: %v", s.Tokens)
		}
	})
	req.ProofKey = hex.EncodeToString(id[:])
	if _, err := d.createToken(req); err != nil {
		t.Fatalf("with a proof key: %v", err)
	}
}

// TestControlTokenRefusedWhileAnOlderControlNodeServes: a control node of a version
// from before state.ApplyRules refuses to record a control token whose identity is
// sealed to the control nodes, and then the node it admits, without an error: its
// state parts from the others' for good (seen in a rolling upgrade). While such a node
// serves, the leader refuses the control token and says which node to upgrade; once
// every serving node announces the current rules, the same request is recorded.
func TestControlTokenRefusedWhileAnOlderControlNodeServes(t *testing.T) {
	d := fleet(t, 0)
	ca, err := d.opts.Dir.LoadCA()
	if err != nil {
		t.Fatal(err)
	}
	req := controlTokenRequest("cp-4", 4, d.now().Add(time.Hour))
	req.Control.Proof = signClaim(t, ca, d.cfg.Mesh, req)
	// cp-2 announces no rules: a version from before them.
	d.ctl.beat(api.ControlHeartbeat{V: api.ProtocolVersion, Node: "cp-2", Raft: api.RaftVoter}, d.now(), 0)
	d.ctl.beat(api.ControlHeartbeat{V: api.ProtocolVersion, Node: "cp-3", Raft: api.RaftVoter, Rules: state.ApplyRules}, d.now(), 0)
	_, err = d.createToken(req)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeOlderControlNode || !strings.Contains(ae.Message, "cp-2") || strings.Contains(ae.Message, "cp-3") {
		t.Fatalf("with cp-2 older: %v, want %s naming cp-2 only", err, api.CodeOlderControlNode)
	}
	d.fsm.Read(func(s *state.State) {
		if _, ok := s.Tokens[req.ID]; ok {
			t.Fatal("the control token was recorded while an older control node serves")
		}
	})
	// A worker token means the same to both versions' rules.
	var id [32]byte
	rand.Read(id[:])
	worker := api.TokenCreateRequest{ID: hex.EncodeToString(id[:]), ProofKey: hex.EncodeToString(id[:]), Node: "web-1", Role: state.RoleWorker, TTL: api.Duration(time.Hour)}
	if _, err := d.createToken(worker); err != nil {
		t.Fatalf("a worker token while an older control node serves: %v", err)
	}
	// cp-2 upgraded: it announces the current rules.
	d.ctl.beat(api.ControlHeartbeat{V: api.ProtocolVersion, Node: "cp-2", Raft: api.RaftVoter, Rules: state.ApplyRules}, d.now(), 0)
	if _, err := d.createToken(req); err != nil {
		t.Fatalf("once every control node is upgraded: %v", err)
	}
	d.fsm.Read(func(s *state.State) {
		if tk := s.Tokens[req.ID]; tk == nil || len(tk.SealedTo) == 0 {
			t.Fatalf("recorded token %+v: want its identity sealed to the control nodes", tk)
		}
	})
}

// TestATokenRequestWrittenOtherwiseThanMeshctlWritesIsRefused: what meshctl never
// sends, a request by hand could (a review): a token id in upper case was recorded
// as sent, while every reader takes ids in lowercase, so the token was pending for
// good, of no use, and kept every later token for its node out; a control token's
// address written otherwise than canonically passed the check of the members'
// addresses, compared as text, and one with an IPv6 zone (an escape sequence in it)
// went to operators' terminals and into every later token's broker list, which no
// token takes. Each is refused as a bad request, nothing recorded, even with the
// CA's signature over it.
func TestATokenRequestWrittenOtherwiseThanMeshctlWritesIsRefused(t *testing.T) {
	d := fleet(t, 0)
	ca, err := d.opts.Dir.LoadCA()
	if err != nil {
		t.Fatal(err)
	}
	var id [32]byte
	rand.Read(id[:])
	upper := api.TokenCreateRequest{ID: strings.ToUpper(hex.EncodeToString(id[:])), ProofKey: hex.EncodeToString(id[:]), Node: "web-9",
		Role: state.RoleWorker, TTL: api.Duration(time.Hour)}
	requests := map[string]api.TokenCreateRequest{"an upper-case id": upper}
	n := 2
	for name, addr := range map[string]string{
		"a port with a leading zero":    "127.0.0.2:07300",
		"an IPv6 zone":                  "[fe80::1%eth0]:7300",
		"an escape sequence in a zone":  "[fe80::1%\x1b[2J]:7300",
		"a wildcard address":            "0.0.0.0:7300",
		"IPv4 written as IPv6":          "[::ffff:127.0.0.2]:7300",
		"IPv6 not in its shortest form": "[fe80:0::1]:7300",
		"port 0":                        "127.0.0.2:0",
	} {
		// Each for a node of its own, so that one recorded keeps no other out.
		n++
		r := controlTokenRequest(fmt.Sprintf("cp-%d", n), n, d.now().Add(time.Hour))
		r.Control.Broker = addr
		r.Control.Proof = signClaim(t, ca, d.cfg.Mesh, r)
		requests[name] = r
	}
	for name, req := range requests {
		_, err := d.createToken(req)
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Code != api.CodeBadRequest {
			t.Errorf("%s: %v, want %s", name, err, api.CodeBadRequest)
		}
	}
	d.fsm.Read(func(s *state.State) {
		for name, req := range requests {
			if _, ok := s.Tokens[req.ID]; ok {
				t.Errorf("%s: the token was recorded", name)
			}
		}
	})
	// The same written as meshctl writes it is minted.
	upper.ID = strings.ToLower(upper.ID)
	if _, err := d.createToken(upper); err != nil {
		t.Errorf("the token with its id in lowercase: %v", err)
	}
	good := controlTokenRequest("cp-2", 2, d.now().Add(time.Hour))
	good.Control.Proof = signClaim(t, ca, d.cfg.Mesh, good)
	if _, err := d.createToken(good); err != nil {
		t.Errorf("a control token at 127.0.0.2:7300: %v", err)
	}
}
