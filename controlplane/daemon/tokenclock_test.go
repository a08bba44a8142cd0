package daemon

import (
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"mesh/controlplane/api"
	"mesh/controlplane/authn"
	"mesh/controlplane/state"
)

// TestAControlTokenWhoseIdentityALeaderAheadDropped (clock audit, finding 2): one
// command stamped by a leader whose clock ran 20 minutes ahead found a pending
// control token expired and dropped its sealed identity. Back under a leader with a
// right clock, the token was pending, and the joiner was answered `internal` ("the
// control token's sealed identity is missing"), which it is told to run again with
// the same token, until the token expired. It is token_expired now, naming the
// clock ahead and what to do, and token list shows the token expired.
func TestAControlTokenWhoseIdentityALeaderAheadDropped(t *testing.T) {
	d := fleet(t, 0)
	e := &enrolling{d: d, node: "cp-2", secret: strings.Repeat("5a", 32)}
	id, _ := authn.SecretID(e.secret)
	sealedTo, sum, err := d.sealToControlNodes([]byte("cp-2's identity as meshctl sealed it"))
	if err != nil {
		t.Fatal(err)
	}
	now := d.now().UTC()
	for _, c := range []state.Command{
		{Op: state.OpCreateToken, At: now, CreateToken: &state.CreateTokenCmd{ID: id, ProofKey: hex.EncodeToString(e.token().ProofKey()), Node: "cp-2", Role: state.RoleControl, TTL: 15 * time.Minute,
			Control: &state.ControlAddrs{Broker: "10.0.0.2:7300", Raft: "10.0.0.2:7301", Cluster: "10.0.0.2:7302"}, SealedTo: sealedTo, SealedSum: sum}},
		// A leader 20 minutes ahead commits a command (a status batch, a purge).
		{Op: state.OpProbe, At: now.Add(20 * time.Minute), Probe: &state.ProbeCmd{ID: "ahead"}},
	} {
		if res, err := d.raft.Apply(c, time.Minute); err != nil || res.Err != nil {
			t.Fatalf("%s: %v %v", c.Op, err, res.Err)
		}
	}
	// A token that can admit no node blocks no address: another control token may
	// be minted for them (a review: it was refused "pending control token").
	if taken := d.controlAddressesTaken("cp-3", &api.ControlMember{Broker: "10.0.0.2:7300", Raft: "10.0.0.2:7301", Cluster: "10.0.0.2:7302"}); taken != "" {
		t.Errorf("the addresses of a token whose identity is lost are taken: %s", taken)
	}
	e.kp, _ = nkeys.CreateUser()
	e.pub, _ = e.kp.PublicKey()
	nc, err := nats.Connect("", nats.InProcessServer(d.broker.InProcess()), nats.Token(observerToken))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if e.answers, err = nc.SubscribeSync(api.EnrolInbox("cp-2", e.pub) + ".>"); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	curve, _ := nkeys.CreateCurveKeys()
	req := e.request()
	req.Role, req.Rules = state.RoleControl, state.ApplyRules
	req.CurveKey, _ = curve.PublicKey()
	resp, _ := e.ask(t, req)
	if resp.OK || resp.Error == nil || resp.Error.Code != api.CodeTokenExpired ||
		!strings.Contains(resp.Error.Message, "a command stamped by a control node whose clock was ahead found it expired and dropped its sealed identity") ||
		!strings.Contains(resp.Error.Message, "meshctl control status") || !strings.Contains(resp.Error.Message, "--replace") {
		t.Fatalf("the joiner is answered %+v; want token_expired naming the clock ahead", resp.Error)
	}
	list, err := d.listTokens(api.TokenListRequest{Node: "cp-2"})
	if err != nil || len(list.Tokens) != 1 || list.Tokens[0].State != state.TokenExpired {
		t.Fatalf("token list: %+v, %v; want the token shown expired", list.Tokens, err)
	}
}
