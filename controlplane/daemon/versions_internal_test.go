package daemon

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
)

// reportApplied is node's status report that it applied version v.
func reportApplied(t testing.TB, node string, v uint64) *nats.Msg {
	t.Helper()
	data, err := json.Marshal(api.Status{V: api.ProtocolVersion, Node: node, HaveApplied: true, AppliedVersion: v, KeyringEpoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	return &nats.Msg{Subject: api.StatusSubject(node), Data: data}
}

// TestAReportFarAheadIsNotFollowed: the next declaration's version follows a node
// that reports it applied more than was declared (a control plane restored from an
// older backup), but only within state.MaxVersionLead. A host whose identity was
// stolen reported 2^64-6; one declaration took its id's count to the last versions,
// a few more wrapped it to v0, which the host (and a clean machine enrolled under the
// id later, whose count continues) refused for good while declare --wait counted it
// converged. Found by an audit of what each identity can make the mesh do.
func TestAReportFarAheadIsNotFollowed(t *testing.T) {
	d := fleet(t, 1)
	const node = "n-0"
	body := []byte(`{"files":[{"path":"etc/a","content":"a\n"}]}`)
	declare := func() (uint64, error) {
		t.Helper()
		res, err := d.declare(api.DeclareRequest{Nodes: []string{node}, Body: body}, requestCall{})
		if err != nil {
			return 0, err
		}
		return res.Assignments[0].Version, nil
	}
	report := func(v uint64) (pending bool) {
		d.handleStatus(reportApplied(t, node, v))
		_, pending = pendingAgent(d, node)
		d.status.flush()
		return pending
	}
	if v, err := declare(); err != nil || v != 1 {
		t.Fatalf("first declaration: v%d, %v; want v1", v, err)
	}
	for i, far := range []uint64{math.MaxUint64 - 5, math.MaxUint64, 0} {
		declared := d.fsmNode(t, node).Declared.Version
		if i == 2 {
			far = declared + state.MaxVersionLead + 1 // just past the lead
		}
		if report(far) {
			t.Fatalf("a report of v%d with v%d declared was kept for the log", far, declared)
		}
		if v, err := declare(); err != nil || v != d.fsmNode(t, node).Declared.Version || v > 1000 {
			t.Fatalf("after a report of v%d: declared v%d, %v; want the count to go on by one", far, v, err)
		}
	}
	if n := d.guard.snapshot().Dropped[DropKey{Subject: "status", Reason: ReasonMalformed}]; n != 3 {
		t.Errorf("%d reports dropped as malformed, want the 3 far ahead", n)
	}
	// Within the lead, as a restored control plane meets it: followed.
	declared := d.fsmNode(t, node).Declared.Version
	ahead := declared + state.MaxVersionLead
	if !report(ahead) {
		t.Fatalf("a report of v%d with v%d declared (the most the lead allows) was not kept", ahead, declared)
	}
	if v, err := declare(); err != nil || v != ahead+1 {
		t.Fatalf("after a report of v%d: declared v%d, %v; want v%d", ahead, v, err, ahead+1)
	}
}

// TestADeclarationThatWouldWrapIsRefused: a node whose declared version is already
// the last there is (a count spent before reports were bounded) is refused a further
// declaration by name, out_of_versions, rather than declared v0, which its host would
// refuse while declare --wait counted it converged; nothing is committed, and the
// other nodes the declaration selects are not declared either.
func TestADeclarationThatWouldWrapIsRefused(t *testing.T) {
	d := fleet(t, 2)
	// What a report of 2^64-2 made of n-0 before: the state machine follows it.
	if res, err := d.raft.Apply(state.Command{Op: state.OpStatus, Status: &state.StatusCmd{Reports: []state.StatusReport{
		{Node: "n-0", Applied: state.Applied{HaveApplied: true, Version: math.MaxUint64 - 1}},
	}}}, time.Minute); err != nil || res.Err != nil {
		t.Fatal(err, res.Err)
	}
	body := []byte(`{"files":[{"path":"etc/a","content":"a\n"}]}`)
	res, err := d.declare(api.DeclareRequest{Nodes: []string{"n-0"}, Body: body}, requestCall{})
	if err != nil || res.Assignments[0].Version != math.MaxUint64 {
		t.Fatalf("declared %+v, %v; want the last version", res, err)
	}
	before := d.fsmNode(t, "n-1").Declared.Version
	for _, req := range []api.DeclareRequest{{Nodes: []string{"n-0"}, Body: body}, {All: true, Body: body}} {
		_, err = d.declare(req, requestCall{})
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Code != api.CodeOutOfVersions || !strings.HasPrefix(ae.Message, "n-0: ") {
			t.Fatalf("a declaration to a node at the last version (all: %v): %v; want %s naming n-0", req.All, err, api.CodeOutOfVersions)
		}
	}
	if v := d.fsmNode(t, "n-0").Declared.Version; v != math.MaxUint64 {
		t.Errorf("n-0 declared v%d after the refusal", v)
	}
	if v := d.fsmNode(t, "n-1").Declared.Version; v != before {
		t.Errorf("n-1 declared v%d after the refused --all, v%d before", v, before)
	}
	if _, err := d.declare(api.DeclareRequest{Nodes: []string{"n-1"}, Body: body}, requestCall{}); err != nil {
		t.Errorf("a declaration to the other node: %v", err)
	}
	// What the refusal says to do: revoked and enrolled again with a new token,
	// the node's new key starts its versions over, and it is declared again.
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	id := strings.Repeat("ab", 32)
	for _, c := range []state.Command{
		{Op: state.OpRevoke, Revoke: &state.RevokeCmd{Node: "n-0"}},
		{Op: state.OpCreateToken, CreateToken: &state.CreateTokenCmd{ID: id, Node: "n-0", Role: state.RoleWorker, TTL: time.Hour}},
		{Op: state.OpEnrol, Enrol: &state.EnrolCmd{TokenID: id, Node: "n-0", Role: state.RoleWorker, PublicKey: pub}},
	} {
		if res, err := d.raft.Apply(c, time.Minute); err != nil || res.Err != nil {
			t.Fatalf("%s: %v %v", c.Op, err, res.Err)
		}
	}
	res, err = d.declare(api.DeclareRequest{Nodes: []string{"n-0"}, Body: body}, requestCall{})
	if err != nil || res.Assignments[0].Version != 1 {
		t.Fatalf("n-0 enrolled again with a new key, then declared: %+v, %v; want v1 after its enrolment's v0", res, err)
	}
}

// loggedInAs enrols node through the log with a key the test holds and returns a
// connection logged in as it over the broker, nonce signed by its key: what a
// host, or whoever copied its identity file, can publish.
func loggedInAs(t *testing.T, d *Daemon, node string) *nats.Conn {
	t.Helper()
	return dialAs(t, d, node, enrolledKey(t, d, node))
}

// enrolledKey enrols node through the log with a key the test holds, and returns it.
func enrolledKey(t *testing.T, d *Daemon, node string) nkeys.KeyPair {
	t.Helper()
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	sum := sha256.Sum256([]byte(node)) // a token id of its own: several nodes may log in
	id := hex.EncodeToString(sum[:])
	for _, c := range []state.Command{
		{Op: state.OpCreateToken, CreateToken: &state.CreateTokenCmd{ID: id, Node: node, Role: state.RoleWorker, TTL: time.Hour}},
		{Op: state.OpEnrol, Enrol: &state.EnrolCmd{TokenID: id, Node: node, Role: state.RoleWorker, PublicKey: pub}},
	} {
		if res, err := d.raft.Apply(c, time.Minute); err != nil || res.Err != nil {
			t.Fatalf("enrolling %s: %v %v", node, err, res.Err)
		}
	}
	return kp
}

// dialAs returns a connection to d's broker logged in with kp, node's key, nonce
// signed, replies on node's inbox: another connection of the same host, or of
// whoever holds its key.
func dialAs(t *testing.T, d *Daemon, node string, kp nkeys.KeyPair) *nats.Conn {
	t.Helper()
	pub, _ := kp.PublicKey()
	nc, err := nats.Connect("", nats.InProcessServer(d.broker.InProcess()), nats.CustomInboxPrefix(api.NodeInbox(node)),
		nats.Nkey(pub, func(nonce []byte) ([]byte, error) { return kp.Sign(nonce) }))
	if err != nil {
		t.Fatalf("logging in as %s: %v", node, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// TestATimeNoAnswerCanHoldIsRefused: a host reported when it last put files back
// with a time that is year 0 as written and year -1 in UTC. The leader kept it, and
// every operator's nodes answer holding the node came back with neither result nor
// error (the answer could not be written): one host's report blinded meshctl nodes
// and status for the whole fleet, each heartbeat. Found by an audit of what each
// identity can make the mesh do. The report is now dropped as malformed.
func TestATimeNoAnswerCanHoldIsRefused(t *testing.T) {
	d := fleet(t, 3)
	op := servedToOperators(t, d)
	host := loggedInAs(t, d, "evil")
	report := `{"v":2,"node":"evil","have_applied":false,"applied_version":0,"keyring_epoch":1,` +
		`"put_back":1,"last_put_back_at":"0000-01-01T00:00:00+23:59"}`
	before := dropped(d, "status", ReasonMalformed)
	if err := host.Publish(api.StatusSubject("evil"), []byte(report)); err != nil {
		t.Fatal(err)
	}
	if err := host.Flush(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for dropped(d, "status", ReasonMalformed) == before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if dropped(d, "status", ReasonMalformed) != before+1 {
		t.Fatal("the report was not dropped as malformed")
	}
	data, _ := api.EncodeAdminRequest(api.OpNodes, api.NodesRequest{})
	msg, err := op.Request(api.AdminSubject(api.OpNodes), data, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var resp api.AdminResponse
	var page api.NodesResult
	if err := json.Unmarshal(msg.Data, &resp); err != nil || resp.Error != nil || json.Unmarshal(resp.Result, &page) != nil || len(page.Nodes) != 4 {
		t.Fatalf("the operators' nodes answer after the report: %s", msg.Data)
	}
}

// TestRevokingAControlNodeSaysWhatItIs: revoke of a control node's id said "no such
// node" of a node the operator sees in meshctl nodes (a CLI audit); it names it a
// control node and the command that removes one, and revokes nothing.
func TestRevokingAControlNodeSaysWhatItIs(t *testing.T) {
	d := fleet(t, 1)
	before := lastIndex(d)
	_, err := d.revoke(api.RevokeRequest{Nodes: []string{d.cfg.Node, "nobody"}})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeNotFound || !strings.Contains(ae.Message, d.cfg.Node+": a control node") ||
		!strings.Contains(ae.Message, "meshctl control remove") || !strings.Contains(ae.Message, "no such node: nobody") {
		t.Fatalf("revoke of control node %s and nobody: %v", d.cfg.Node, err)
	}
	if lastIndex(d) != before {
		t.Error("the refused revocation wrote to the log")
	}
}
