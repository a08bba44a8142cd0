package daemon

import (
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
)

// declareAs sends a declaration through the broker as meshctl does: under request id
// id (none: ""), marked as sent again or not.
func declareAs(t *testing.T, nc *nats.Conn, req api.DeclareRequest, id string, again bool) (api.DeclareResult, *api.Error) {
	t.Helper()
	encode := api.EncodeAdminRequest
	if again {
		encode = api.EncodeAdminRequestAgain
	}
	data, err := encode(api.OpDeclare, req)
	if err != nil {
		t.Fatal(err)
	}
	m := &nats.Msg{Subject: api.AdminSubject(api.OpDeclare), Data: data, Header: nats.Header{}}
	if id != "" {
		m.Header.Set(api.RequestHeader, id)
	}
	msg, err := nc.RequestMsg(m, 10e9)
	if err != nil {
		t.Fatal(err)
	}
	var resp api.AdminResponse
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Error != nil {
		return api.DeclareResult{}, resp.Error
	}
	var res api.DeclareResult
	if err := json.Unmarshal(resp.Result, &res); err != nil {
		t.Fatal(err)
	}
	return res, nil
}

// TestADeclarationSentAgainIsCarriedOutOnce: meshctl sends a declaration again, under
// the request id of its first sending, when the answer to that was lost (the broker
// it went through stopped). The control plane answers it with what the first did, at
// the versions its nodes hold, and sends those nodes their declarations again (the
// leader that carried it out may have stopped before it sent them; not by the one
// that sent them); it declares nothing twice. A declaration sent again whose first sending never arrived is
// carried out; one marked again without an id, or under a malformed id, is refused.
func TestADeclarationSentAgainIsCarriedOutOnce(t *testing.T) {
	d := fleet(t, 2)
	nc := servedToOperators(t, d)
	got, _ := counter(t, d)
	req := api.DeclareRequest{All: true, Body: json.RawMessage(`{"files":[{"path":"a","content":"x"}]}`)}
	id := api.NewRequestID()

	first, aerr := declareAs(t, nc, req, id, false)
	if aerr != nil || first.Repeated || len(first.Assignments) != 2 {
		t.Fatalf("first sending: %+v, %v", first, aerr)
	}
	index, sent := lastIndex(d), settled(got)
	again, aerr := declareAs(t, nc, req, id, true)
	if aerr != nil || !again.Repeated || again.Body != first.Body {
		t.Fatalf("sent again: %+v, %v; want the first's declaration, repeated", again, aerr)
	}
	for i, a := range again.Assignments {
		if a != first.Assignments[i] {
			t.Errorf("sent again, assignment %d: %+v; want the first's %+v", i, a, first.Assignments[i])
		}
	}
	if lastIndex(d) != index {
		t.Errorf("sending it again wrote to the Raft log: index %d, then %d", index, lastIndex(d))
	}
	time.Sleep(200 * time.Millisecond)
	if n := got.Load(); n != sent {
		t.Errorf("%d declarations sent again by the node that sent them; want none (the first answer was slow, not lost)", n-sent)
	}
	// A node that did not send them (the leader that carried it out stopped first)
	// sends them again.
	d.sent = sentRequests{}
	if again, aerr := declareAs(t, nc, req, id, true); aerr != nil || !again.Repeated {
		t.Fatalf("sent again to another leader: %+v, %v", again, aerr)
	}
	waitFor(t, 5*time.Second, "the declarations sent again", func() bool { return got.Load() >= sent+2 })
	// Then once: sent again and again, it is not the fleet's declarations
	// signed and sent each time.
	resent := settled(got)
	for range 3 {
		if again, aerr := declareAs(t, nc, req, id, true); aerr != nil || !again.Repeated {
			t.Fatalf("sent again a third time: %+v, %v", again, aerr)
		}
	}
	time.Sleep(200 * time.Millisecond)
	if n := got.Load(); n != resent {
		t.Errorf("%d declarations sent by the repeats after the first; want none", n-resent)
	}
	// The id of another change (a script reusing ids): refused, not answered as
	// carried out, and nothing written or sent.
	index = lastIndex(d)
	other := api.DeclareRequest{Nodes: []string{"n-1"}, Body: json.RawMessage(`{"files":[{"path":"b","content":"other"}]}`)}
	// The same body for other nodes is another change too (a review of the first
	// form of this check, which compared the body alone).
	sameBodyElsewhere := api.DeclareRequest{Nodes: []string{"n-1"}, Body: req.Body}
	for _, again := range []bool{false, true} {
		for what, r := range map[string]api.DeclareRequest{"another body": other, "the body for other nodes": sameBodyElsewhere} {
			if res, aerr := declareAs(t, nc, r, id, again); aerr == nil || aerr.Code != api.CodeBadRequest || !strings.Contains(aerr.Message, "names another change") {
				t.Errorf("%s under the id (again %v): %+v, %v; want bad_request", what, again, res, aerr)
			}
		}
	}
	if lastIndex(d) != index || got.Load() != resent {
		t.Errorf("another body under the id wrote to the log (index %d, then %d) or sent %d declarations", index, lastIndex(d), got.Load()-resent)
	}

	fresh, aerr := declareAs(t, nc, req, api.NewRequestID(), true)
	if aerr != nil || fresh.Repeated || fresh.Assignments[0].Version != first.Assignments[0].Version+1 {
		t.Fatalf("sent again, its first sending never arrived: %+v, %v; want it carried out", fresh, aerr)
	}

	for name, tc := range map[string]struct {
		id    string
		again bool
	}{
		"again without an id": {"", true},
		"a short id":          {"abc", false},
		"an id in capitals":   {strings.ToUpper(api.NewRequestID()), true},
	} {
		before := lastIndex(d)
		if _, aerr := declareAs(t, nc, req, tc.id, tc.again); aerr == nil || aerr.Code != api.CodeBadRequest {
			t.Errorf("%s: %v; want bad_request", name, aerr)
		}
		if lastIndex(d) != before {
			t.Errorf("%s wrote to the Raft log", name)
		}
	}
}

// TestADeclarationSentAgainWhileAnOlderNodeRuns: while a control node on older rules
// serves (an upgrade under way), ids cannot be kept alike on every node, so a
// declaration is carried out without its id, and one sent again is refused
// (unavailable, nothing written): whether its first sending was carried out cannot
// be told.
func TestADeclarationSentAgainWhileAnOlderNodeRuns(t *testing.T) {
	d := fleet(t, 1)
	nc := servedToOperators(t, d)
	d.ctl.beat(api.ControlHeartbeat{Node: "cp-old", Rules: 4}, d.now(), 0)
	req := api.DeclareRequest{All: true, Body: json.RawMessage(`{"files":[]}`)}
	id := api.NewRequestID()
	if _, aerr := declareAs(t, nc, req, id, false); aerr != nil {
		t.Fatalf("first sending, an older node running: %v", aerr)
	}
	before := lastIndex(d)
	_, aerr := declareAs(t, nc, req, id, true)
	if aerr == nil || aerr.Code != api.CodeUnavailable || !strings.Contains(aerr.Message, "cp-old") {
		t.Fatalf("sent again, an older node running: %v; want unavailable naming cp-old", aerr)
	}
	if lastIndex(d) != before {
		t.Errorf("the refusal wrote to the Raft log")
	}
}

// settled returns n once it has not moved for 200 ms: the messages a call sent
// have all arrived.
func settled(n *atomic.Int64) int64 {
	last := n.Load()
	for {
		time.Sleep(200 * time.Millisecond)
		now := n.Load()
		if now == last {
			return now
		}
		last = now
	}
}

// servedToOperators serves d's operator API and returns a connection with the
// operators' credentials, closed with the test.
func servedToOperators(t *testing.T, d *Daemon) *nats.Conn {
	t.Helper()
	if err := d.serveAPI(); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect("", nats.InProcessServer(d.broker.InProcess()), nats.Token(operatorToken))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// TestADeclarationSentAgainSaysWhichNodesHoldItNoLonger: a script's declaration whose
// answer was lost is run again under its request id after another operator
// declared another body to one of its nodes and revoked another. The answer listed
// only the nodes that hold its body now: the others went unsaid, and the rerun's
// --wait exited 0 where the first run's said "declared another body since" (a
// review). They are listed as no longer holding it, superseded by the version that
// did or revoked when; a node enrolled since the request is not among them.
func TestADeclarationSentAgainSaysWhichNodesHoldItNoLonger(t *testing.T) {
	d := fleet(t, 4)
	nc := servedToOperators(t, d)
	req := api.DeclareRequest{All: true, Body: json.RawMessage(`{"files":[{"path":"a","content":"x"}]}`)}
	id := api.NewRequestID()
	first, aerr := declareAs(t, nc, req, id, false)
	if aerr != nil || len(first.Assignments) != 4 {
		t.Fatalf("first sending: %+v, %v", first, aerr)
	}
	other, aerr := declareAs(t, nc, api.DeclareRequest{Nodes: []string{"n-1"}, Body: json.RawMessage(`{"files":[{"path":"a","content":"y"}]}`)}, api.NewRequestID(), false)
	if aerr != nil {
		t.Fatal(aerr)
	}
	if _, err := d.revoke(api.RevokeRequest{Node: "n-2"}); err != nil {
		t.Fatal(err)
	}
	// n-3's machine is revoked, and another enrolled under the id since: the
	// first run's wait would say n-3 was declared another body.
	if _, err := d.revoke(api.RevokeRequest{Node: "n-3"}); err != nil {
		t.Fatal(err)
	}
	enrol := func(node, tok string) {
		t.Helper()
		kp, _ := nkeys.CreateUser()
		pub, _ := kp.PublicKey()
		at := d.now().UTC()
		for _, c := range []state.Command{
			{Op: state.OpCreateToken, At: at, Rules: state.RulesTokensFollowNodes, CreateToken: &state.CreateTokenCmd{ID: tok, Node: node, Role: state.RoleWorker, TTL: time.Hour}},
			{Op: state.OpEnrol, At: at, Enrol: &state.EnrolCmd{TokenID: tok, Node: node, Role: state.RoleWorker, PublicKey: pub}},
		} {
			if res, err := d.raft.Apply(c, time.Minute); err != nil || res.Err != nil {
				t.Fatal(err, res.Err)
			}
		}
	}
	enrol("n-3", strings.Repeat("cd", 32))
	enrol("n-9", strings.Repeat("ab", 32))
	// n-7 did not exist at the request: enrolled, revoked and enrolled again since,
	// it is none of the request's nodes.
	enrol("n-7", strings.Repeat("e1", 32))
	if _, err := d.revoke(api.RevokeRequest{Node: "n-7"}); err != nil {
		t.Fatal(err)
	}
	enrol("n-7", strings.Repeat("e2", 32))
	// Declared another body, as n-1 was, but enrolled after the request.
	if _, aerr := declareAs(t, nc, api.DeclareRequest{Nodes: []string{"n-9"}, Body: json.RawMessage(`{"files":[{"path":"a","content":"z"}]}`)}, api.NewRequestID(), false); aerr != nil {
		t.Fatal(aerr)
	}

	again, aerr := declareAs(t, nc, req, id, true)
	if aerr != nil || !again.Repeated {
		t.Fatalf("sent again: %+v, %v", again, aerr)
	}
	if len(again.Assignments) != 1 || again.Assignments[0] != first.Assignments[0] {
		t.Errorf("sent again: assignments %+v, want n-0's first %+v alone", again.Assignments, first.Assignments[0])
	}
	if len(again.NoLonger) != 3 {
		t.Fatalf("sent again: no longer %+v, want n-1 superseded, n-2 and n-3's machine revoked", again.NoLonger)
	}
	if p := again.NoLonger[0]; p.Node != "n-1" || p.State != api.ProgressSuperseded || p.Version != other.Assignments[0].Version {
		t.Errorf("n-1: %+v, want superseded by v%d", p, other.Assignments[0].Version)
	}
	if p := again.NoLonger[1]; p.Node != "n-2" || p.State != api.ProgressRevoked || p.RevokedAt.IsZero() {
		t.Errorf("n-2: %+v, want revoked, with when", p)
	}
	if p := again.NoLonger[2]; p.Node != "n-3" || p.State != api.ProgressRevoked || p.RevokedAt.IsZero() {
		t.Errorf("n-3: %+v, want its first machine revoked, with when", p)
	}
}
