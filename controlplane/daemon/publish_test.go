package daemon

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
	"mesh/declarations"
)

// lockedBuffer is a log the daemon's goroutines write to while a test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// loggedDaemon is a single control node logging to log, with nodes enrolled.
func loggedDaemon(t *testing.T, log *lockedBuffer, nodes []string) *Daemon {
	t.Helper()
	dir := bootstrapped(t, "logs")
	d, err := Open(context.Background(), Options{Dir: dir, Logger: slog.New(slog.NewTextHandler(log, nil)),
		Timeouts: testTimeouts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	for i, node := range nodes {
		kp, _ := nkeys.CreateUser()
		pub, _ := kp.PublicKey()
		id := hex.EncodeToString([]byte(fmt.Sprintf("%032d", i)))
		for _, c := range []state.Command{
			{Op: state.OpCreateToken, CreateToken: &state.CreateTokenCmd{ID: id, Node: node, Role: state.RoleWorker, TTL: time.Hour}},
			{Op: state.OpEnrol, Enrol: &state.EnrolCmd{TokenID: id, Node: node, Role: state.RoleWorker, PublicKey: pub}},
		} {
			if res, err := d.raft.Apply(c, time.Minute); err != nil || res.Err != nil {
				t.Fatalf("seed %s: %v %v", node, err, res.Err)
			}
		}
	}
	return d
}

// TestFanoutNotSentIsOneLine: a declaration to many nodes that the broker does not
// take (the control plane's own connection closed under it) is one warning saying
// how many nodes did not get it and why, not one line per node: a fleet of 10,000
// wrote 10,000 lines.
func TestFanoutNotSentIsOneLine(t *testing.T) {
	var log lockedBuffer
	var nodes []string
	for i := range 40 {
		nodes = append(nodes, fmt.Sprintf("n-%d", i))
	}
	d := loggedDaemon(t, &log, nodes)
	d.conns.publisher.Close()
	d.publishDeclarations(nodes)
	lines := strings.Count(log.String(), "not sent; the node")
	if lines != 1 {
		t.Fatalf("a fan-out to %d nodes not sent gave %d lines, want 1:\n%.3000s", len(nodes), lines, log.String())
	}
	if !strings.Contains(log.String(), fmt.Sprintf("nodes=%d", len(nodes))) || !strings.Contains(log.String(), "connection closed") {
		t.Fatalf("the line does not say how many nodes, and why:\n%.3000s", log.String())
	}
}

// TestSyncsNotAnsweredLogBounded: a fleet syncing (every host after a control node
// restarts) while the control plane's connections cannot send gives a line every
// interval with how many, not a line (or two) per host.
func TestSyncsNotAnsweredLogBounded(t *testing.T) {
	var log lockedBuffer
	var nodes []string
	for i := range 40 {
		nodes = append(nodes, fmt.Sprintf("n-%d", i))
	}
	d := loggedDaemon(t, &log, nodes)
	d.conns.publisher.Close()
	d.conns.hosts.Close()
	req, _ := json.Marshal(api.SyncRequest{V: api.ProtocolVersion})
	for _, n := range nodes {
		d.handleSync(&nats.Msg{Subject: api.SyncSubject(n), Reply: api.NodeInbox(n) + ".r1", Data: req})
	}
	for _, msg := range []string{"sync: envelope not sent", "sync reply not sent"} {
		if lines := strings.Count(log.String(), msg); lines != 1 {
			t.Errorf("%d syncs not answered gave %d lines %q, want 1:\n%.3000s", len(nodes), lines, msg, log.String())
		}
	}
}

// takeBatches records, as the nodes' status reports do, that their agents take
// declarations signed in a batch.
func takeBatches(t testing.TB, d *Daemon, nodes []string) {
	t.Helper()
	cmd := &state.StatusCmd{}
	for _, n := range nodes {
		cmd.Reports = append(cmd.Reports, state.StatusReport{Node: n, Applied: state.Applied{BatchProofs: true}})
	}
	if res, err := d.raft.Apply(state.Command{Op: state.OpStatus, Status: cmd}, time.Minute); err != nil || res.Err != nil {
		t.Fatalf("status: %v %v", err, res.Err)
	}
}

// verifyAs verifies env as node's agent would, with the keys the control plane signs
// with, and returns the envelope as decoded.
func verifyAs(t *testing.T, d *Daemon, node string, raw []byte) declarations.Envelope {
	t.Helper()
	var exp declarations.Expect
	d.fsm.Read(func(s *state.State) {
		exp = declarations.Expect{Mesh: s.Mesh, Node: node, NodeKey: s.Nodes[node].PublicKey, Now: time.Now()}
	})
	var trusted []ed25519.PublicKey
	for _, k := range d.signer.currentKeys() {
		trusted = append(trusted, k.Public().(ed25519.PublicKey))
	}
	if _, err := declarations.VerifyDeclaration(raw, trusted, exp); err != nil {
		t.Fatalf("%s: the envelope does not verify: %v", node, err)
	}
	var env declarations.Envelope
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatal(err)
	}
	return env
}

// TestAFanOutSignsOneBatchForAgentsThatTakeIt: a declaration to nodes whose agents
// take batch proofs is signed once for them all (decision 0034), each node's
// envelope carrying its proof; nodes whose agents do not (older agents, which refuse
// the proof as malformed) get theirs signed on their own. A node that asks for its
// declaration again without batch proofs (its agent downgraded since its last
// report) is not handed the batch envelope kept from the fan-out.
func TestAFanOutSignsOneBatchForAgentsThatTakeIt(t *testing.T) {
	d := fleet(t, 12)
	var batched, single []string
	for i := range 12 {
		if i < 8 {
			batched = append(batched, fmt.Sprintf("n-%d", i))
		} else {
			single = append(single, fmt.Sprintf("n-%d", i))
		}
	}
	takeBatches(t, d, batched)
	nc, err := nats.Connect("", nats.InProcessServer(d.broker.InProcess()), nats.Token(observerToken))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	decls, err := nc.SubscribeSync("mesh.node.*.decl")
	if err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	if _, err := d.declare(api.DeclareRequest{All: true, Body: json.RawMessage(`{"files":[{"path":"a","content":"x"}]}`)}, requestCall{}); err != nil {
		t.Fatal(err)
	}
	got := map[string]declarations.Envelope{}
	raws := map[string][]byte{}
	for range 12 {
		m, err := decls.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("%d of 12 declarations arrived: %v", len(got), err)
		}
		node := nodeOf(m.Subject)
		got[node], raws[node] = verifyAs(t, d, node, m.Data), m.Data
	}
	var rootSig []byte
	for _, n := range batched {
		env := got[n]
		if env.Batch == nil {
			t.Fatalf("%s takes batch proofs, and its envelope carries none", n)
		}
		if rootSig == nil {
			rootSig = env.Signatures[0].Sig
		} else if !bytes.Equal(env.Signatures[0].Sig, rootSig) {
			t.Fatalf("%s's envelope carries another signature: the batch was signed more than once", n)
		}
	}
	for _, n := range single {
		if got[n].Batch != nil {
			t.Fatalf("%s's agent does not take batch proofs, and its envelope carries one", n)
		}
	}
	sync := func(node string, proofs bool) declarations.Envelope {
		req, _ := json.Marshal(api.SyncRequest{V: api.ProtocolVersion, KeyringEpoch: 1, MembershipVersion: 1 << 20, BatchProofs: proofs})
		d.handleSync(&nats.Msg{Subject: api.SyncSubject(node), Reply: api.NodeInbox(node) + ".1", Data: req})
		m, err := decls.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("the sync of %s sent no declaration: %v", node, err)
		}
		return verifyAs(t, d, node, m.Data)
	}
	if env := sync("n-0", false); env.Batch != nil {
		t.Fatal("a sync without batch proofs was answered with the batch envelope kept from the fan-out")
	}
	if env := sync("n-1", true); env.Batch == nil {
		t.Fatal("a sync with batch proofs was not answered with the envelope kept from the fan-out")
	}
}

// TestABatchSignsTheOthersWhenOneCannotBe: a node whose declaration cannot be signed
// (here its validity window ends as it starts, which only a damaged state would
// hold) is left out of the batch with its error, and every other node's envelope is
// signed and verifies. The payloads' buffer was dropped by the failed one, and the
// next node's payload was cut from nothing: the leader panicked on the fan-out's
// goroutine (found by an audit of decision 0034).
func TestABatchSignsTheOthersWhenOneCannotBe(t *testing.T) {
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s := newSigner([]ed25519.PrivateKey{k})
	now := time.Now().UTC()
	body := []byte(`{"files":[]}`)
	key := "U" + strings.Repeat("A", 55)
	mk := func(node string, expires time.Time) state.DeclarationInput {
		return state.DeclarationInput{Mesh: "m", Node: node, NodeKey: key,
			Declared:     state.Declared{Version: 1, BodyDigest: state.BodyDigest(body), IssuedAt: now, ExpiresAt: expires},
			KeyringEpoch: 1, Body: body, BatchProofs: true}
	}
	ins := []state.DeclarationInput{mk("a", now.Add(time.Hour)), mk("b", now), mk("c", now.Add(time.Hour)), mk("d", now.Add(time.Hour))}
	b := s.batch(ins)
	for i, in := range ins {
		env, err := b.envelope(i)
		if in.Node == "b" {
			if err == nil || !strings.Contains(err.Error(), "expires_at is not after issued_at") {
				t.Fatalf("b: %v, want its own error", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", in.Node, err)
		}
		exp := declarations.Expect{Mesh: "m", Node: in.Node, NodeKey: key, Now: now}
		if _, err := declarations.VerifyDeclaration(env, []ed25519.PublicKey{k.Public().(ed25519.PublicKey)}, exp); err != nil {
			t.Fatalf("%s: %v", in.Node, err)
		}
	}
}

// TestARepeatedEnrolmentIsNotAnsweredWithABatchEnvelope: the envelope kept from a
// fan-out signed in a batch is not the answer to the node's enrolment sent again
// (its answer lost): the request says nothing of batch proofs, and an older agent
// would refuse the proof as malformed.
func TestARepeatedEnrolmentIsNotAnsweredWithABatchEnvelope(t *testing.T) {
	d := fleet(t, 2)
	e := newEnrolling(t, d, "web-1")
	e.enrol(t)
	takeBatches(t, d, []string{"n-0", "n-1", "web-1"})
	if _, err := d.declare(api.DeclareRequest{All: true, Body: json.RawMessage(`{"files":[{"path":"a","content":"x"}]}`)}, requestCall{}); err != nil {
		t.Fatal(err)
	}
	var in state.DeclarationInput
	d.fsm.Read(func(s *state.State) { in, _ = s.DeclarationInput("web-1") })
	if env, ok := d.signer.kept(in); !ok || !strings.Contains(string(env), `"batch":`) {
		t.Fatal("the fan-out kept no batch envelope for web-1: the test proves nothing")
	}
	again, _ := e.enrol(t)
	if strings.Contains(string(again.Declaration), `"batch":`) {
		t.Fatalf("the repeated enrolment was answered with the batch envelope: %.300s", again.Declaration)
	}
	verifyAs(t, d, "web-1", again.Declaration)
}

// TestADowngradedAgentIsSentItsDeclarationSignedOnItsOwn: a node whose record says
// its agent takes batch proofs, whose agent was put back to one that does not, is
// sent a batch envelope once; its refusal (malformed), reported without
// batch_proofs, is recorded, and the leader's next re-sending to nodes behind signs
// its declaration on its own, which the older agent verifies.
func TestADowngradedAgentIsSentItsDeclarationSignedOnItsOwn(t *testing.T) {
	d := fleet(t, 2)
	loggedInAs(t, d, "h-1") // connected: the leader re-sends to live nodes only
	takeBatches(t, d, []string{"h-1", "n-1", "h-1"})
	nc, err := nats.Connect("", nats.InProcessServer(d.broker.InProcess()), nats.Token(observerToken))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	decls, err := nc.SubscribeSync(api.DeclarationSubject("h-1"))
	if err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	if _, err := d.declare(api.DeclareRequest{All: true, Body: json.RawMessage(`{"files":[{"path":"a","content":"x"}]}`)}, requestCall{}); err != nil {
		t.Fatal(err)
	}
	m, err := decls.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if env := verifyAs(t, d, "h-1", m.Data); env.Batch == nil {
		t.Fatal("the fan-out did not sign in a batch: the test proves nothing")
	}
	// The older agent's report: the envelope refused as malformed, no batch_proofs.
	report, _ := json.Marshal(api.Status{V: api.ProtocolVersion, Node: "h-1", KeyringEpoch: 1,
		Error: &api.StatusError{Code: "malformed", Message: "unknown field \"batch\"", Version: 0}})
	d.handleStatus(&nats.Msg{Subject: api.StatusSubject("h-1"), Data: report})
	d.status.flush()
	// The re-sending a reconcile interval after the declaration was issued.
	d.opts.ReconcileInterval = time.Millisecond
	time.Sleep(5 * time.Millisecond)
	d.reconcile(d.now())
	m, err = decls.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("the leader did not send n-0 its declaration again: %v", err)
	}
	if env := verifyAs(t, d, "h-1", m.Data); env.Batch != nil {
		t.Fatal("the downgraded agent was sent a batch envelope again")
	}
}

// TestAControlNodeOnOlderRulesThanTheStateIsReported (audit of mixed versions,
// finding 2): a control node put back to an older meshctl after a snapshot held
// newer entries served silently, a state it cannot have built. A heartbeat
// announcing rules older than those the state was built by is logged as an error,
// once a minute per node; one announcing them, or more, is not.
func TestAControlNodeOnOlderRulesThanTheStateIsReported(t *testing.T) {
	var log lockedBuffer
	d := loggedDaemon(t, &log, nil)
	// An entry stamped with this version's rules, as the first mint after the
	// last control node is upgraded is.
	if res, err := d.raft.Apply(state.Command{Op: state.OpPurge, At: d.now().UTC(), Rules: state.ApplyRules}, time.Minute); err != nil || res.Err != nil {
		t.Fatalf("a stamped entry: %v %v", err, res.Err)
	}
	beat := func(node string, rules int) {
		data, _ := json.Marshal(api.ControlHeartbeat{V: api.ProtocolVersion, Node: node, Raft: api.RaftVoter, Rules: rules})
		d.handleHeartbeat(&nats.Msg{Subject: api.ControlHeartbeatSubject(node), Data: data})
	}
	beat("cp-2", state.ApplyRules)
	beat("cp-3", 2)
	beat("cp-3", 2)
	const msg = "applies the log by rules older than those the mesh's state was built by"
	if got := strings.Count(log.String(), msg); got != 1 || !strings.Contains(log.String(), "node=cp-3") || !strings.Contains(log.String(), "level=ERROR") {
		t.Fatalf("%d reports, want one naming cp-3 as an error:\n%s", got, log.String())
	}
	if strings.Contains(log.String(), "node=cp-2 its_rules") {
		t.Errorf("a node on the state's rules was reported:\n%s", log.String())
	}
}

// TestAJoinOlderThanTheStateIsRefused (audit of mixed versions, finding 3): a join
// by a meshctl older than the rules the state was built by was admitted, stopped at
// the first entry it could not apply, and was rolled back as "not replicating the
// log". It is refused up front, nothing used; a join of these rules is not.
func TestAJoinOlderThanTheStateIsRefused(t *testing.T) {
	var log lockedBuffer
	d := loggedDaemon(t, &log, nil)
	if e := d.checkJoinerRules(0); e != nil {
		t.Fatalf("a state no entry stamped: %v", e)
	}
	if res, err := d.raft.Apply(state.Command{Op: state.OpPurge, At: d.now().UTC(), Rules: state.ApplyRules}, time.Minute); err != nil || res.Err != nil {
		t.Fatalf("a stamped entry: %v %v", err, res.Err)
	}
	for _, older := range []int{0, state.ApplyRules - 1} {
		if e := d.checkJoinerRules(older); e == nil || e.Code != api.CodeOlderControlNode || !strings.Contains(e.Message, "the token is not used") {
			t.Errorf("a join of rules %d: %v, want older_control_node", older, e)
		}
	}
	if e := d.checkJoinerRules(state.ApplyRules); e != nil {
		t.Errorf("a join of this version: %v", e)
	}
}

// TestADeclarationIsLoggedWithWhatAndToWhom (audit of fleet observability, finding
// 9): "declaration committed and sent nodes=N" said neither what was declared nor to
// whom. The line names the selector, the body's digest, the request id, the versions
// and, when few, the nodes.
func TestADeclarationIsLoggedWithWhatAndToWhom(t *testing.T) {
	var log lockedBuffer
	d := loggedDaemon(t, &log, []string{"web-1", "web-2"})
	res, err := d.declare(api.DeclareRequest{Nodes: []string{"web-1", "web-2"}, Body: json.RawMessage(`{"files":[]}`)}, requestCall{ID: strings.Repeat("ab", 16)})
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for l := range strings.SplitSeq(log.String(), "\n") {
		if strings.Contains(l, "declaration committed and sent") {
			line = l
		}
	}
	for _, want := range []string{`selector="--node web-1,web-2"`, "body=" + res.Body[:12], "request_id=" + strings.Repeat("ab", 16), "versions=v1..v1", "targets=web-1,web-2", "nodes=2"} {
		if !strings.Contains(line, want) {
			t.Errorf("the line lacks %s: %s", want, line)
		}
	}
}
