package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/controlplane/api"
	"mesh/declarations"
)

// heldBy opens n connections logged in with node's key (enrolled here), each
// subscribed subs times on the node's declaration subject, and returns them with the
// bytes and envelopes those subscriptions received: a host holding every copy the
// broker lets it take of what is sent to it. It waits until the control plane counts
// the connections.
func heldBy(t *testing.T, d *Daemon, node string, n, subs int) (conns []*nats.Conn, key string, got, envelopes *atomic.Int64) {
	t.Helper()
	kp := enrolledKey(t, d, node)
	key, _ = kp.PublicKey()
	got, envelopes = new(atomic.Int64), new(atomic.Int64)
	for range n {
		nc := dialAs(t, d, node, kp)
		for range subs {
			sub, err := nc.Subscribe(api.DeclarationSubject(node), func(m *nats.Msg) {
				got.Add(int64(len(m.Data)))
				envelopes.Add(1)
			})
			if err != nil {
				t.Fatal(err)
			}
			_ = sub.SetPendingLimits(-1, -1)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := nc.LastError(); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, nc)
	}
	deadline := time.Now().Add(10 * time.Second)
	for d.presence.Open(key) < n {
		if time.Now().After(deadline) {
			t.Fatalf("the control plane counts %d of %s's %d connections", d.presence.Open(key), node, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return conns, key, got, envelopes
}

// declareBytes declares for node a body of files of about size bytes in all (random,
// so that nothing compresses them), and returns the version.
func declareBytes(t *testing.T, d *Daemon, node string, size int) uint64 {
	t.Helper()
	var files []string
	for left := size; left > 0; left -= 256 << 10 {
		var b strings.Builder
		for b.Len() < min(left, 256<<10) {
			fmt.Fprintf(&b, "%016x", rand.Uint64())
		}
		files = append(files, fmt.Sprintf(`{"path":"etc/blob-%d","content":"%s"}`, len(files), b.String()))
	}
	body := `{"files":[` + strings.Join(files, ",") + `]}`
	res, err := d.declare(api.DeclareRequest{Nodes: []string{node}, Body: json.RawMessage(body)}, requestCall{})
	if err != nil || len(res.Assignments) != 1 {
		t.Fatalf("declare: %v %+v", err, res)
	}
	return res.Assignments[0].Version
}

// TestSyncAnswersArePaidForEveryCopy: a host holding its 4 connections with 4
// subscriptions each on its declaration subject (the most the broker lets it hold:
// its requests name a reply subject it does not subscribe to), syncing at the most
// its message rate allows (19 a second, so that it is never disconnected for it),
// receives no more bytes than its budget pays for: its burst and what refills, a
// message for every SyncAnswerBytes received. Before, an answer was charged a copy
// a connection while each subscription got one: with 15 subscriptions a connection,
// 17.75 MiB a second where the budget paid for 1.2.
func TestSyncAnswersArePaidForEveryCopy(t *testing.T) {
	d := fleet(t, 0)
	if err := d.serveAPI(); err != nil {
		t.Fatal(err)
	}
	conns, _, got, _ := heldBy(t, d, "evil", 4, 4)
	declareBytes(t, d, "evil", 200<<10)
	settled(got) // the operator's push: not the node's to pay
	got.Store(0)

	budgets := d.guard.budgets
	refused := func() uint64 { return d.guard.snapshot().Refused[DropKey{Subject: "sync", Reason: ReasonRate}] }
	req, _ := json.Marshal(api.SyncRequest{V: api.ProtocolVersion, KeyringEpoch: 1})
	start := time.Now()
	requests := 0
	for time.Since(start) < 3*time.Second {
		if err := conns[0].PublishRequest(api.SyncSubject("evil"), api.NodeInbox("evil")+".unheard", req); err != nil {
			t.Fatal(err)
		}
		requests++
		time.Sleep(time.Until(start.Add(time.Duration(requests) * time.Second / 19)))
	}
	received := settled(got)
	elapsed := time.Since(start).Seconds()
	answered := requests - int(refused())
	// Paid: the burst and the refill, less the requests; each answer may send up to
	// a unit more than it paid for (its cost is rounded down).
	paid := (budgets.Burst + budgets.PerSecond*elapsed - float64(requests) + float64(answered)) * float64(budgets.SyncAnswerBytes)
	t.Logf("%d syncs in %.1f s, %d refused; received %.1f MiB, %.2f MiB/s; the budget pays for %.1f MiB",
		requests, elapsed, refused(), float64(received)/(1<<20), float64(received)/elapsed/(1<<20), paid/(1<<20))
	if received == 0 || refused() == 0 {
		t.Fatalf("%.1f MiB received, %d syncs refused: the test needs both", float64(received)/(1<<20), refused())
	}
	if float64(received) > paid {
		t.Errorf("the host received %.1f MiB in %.1f s, its budget pays for %.1f MiB", float64(received)/(1<<20), elapsed, paid/(1<<20))
	}
	for _, nc := range conns {
		if !nc.IsConnected() {
			t.Error("a connection of the host was closed: syncing within its message rate must not be")
		}
	}
}

// TestRepeatedEnrolmentsArePaidForEveryCopy: a repeated enrolment is answered from
// the state with the node's declaration, sent to the inbox bound to the key, where
// each connection of the key may subscribe up to the hosts account's cap. The answer
// is charged to the client's budget by its size times those copies, and once the
// budget cannot pay, refused (unavailable) until it refills. Before, each repeat cost
// one message whatever its answer: 45 copies of each at 19 a second.
func TestRepeatedEnrolmentsArePaidForEveryCopy(t *testing.T) {
	d := fleet(t, 0)
	e := newEnrolling(t, d, "web-1")
	e.enrol(t)
	declareBytes(t, d, "web-1", 40<<10)
	for range 3 { // the enrolled key's connections: copies of what goes to its inbox
		dialAs(t, d, "web-1", e.kp)
	}
	deadline := time.Now().Add(10 * time.Second)
	for d.presence.Open(e.pub) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the control plane counts %d of the key's 3 connections", d.presence.Open(e.pub))
		}
		time.Sleep(10 * time.Millisecond)
	}
	clock := time.Now()
	d.guard.now = func() time.Time { return clock }
	budgets := d.guard.budgets
	refused := func() uint64 { return d.guard.snapshot().Refused[DropKey{Subject: "enrol", Reason: ReasonRate}] }
	// ask sends a repeat and returns its answer, or ok false when none comes: a
	// request its budget cannot pay is dropped.
	data, _ := json.Marshal(e.request())
	ask := func() (resp api.EnrolResponse, size int, ok bool) {
		e.d.handleEnrol(&nats.Msg{Subject: api.EnrolKeySubject(e.node, e.pub), Reply: api.EnrolInbox(e.node, e.pub) + ".1", Data: data})
		msg, err := e.answers.NextMsg(time.Second)
		if err != nil {
			return resp, 0, false
		}
		if err := json.Unmarshal(msg.Data, &resp); err != nil {
			t.Fatal(err)
		}
		return resp, len(msg.Data), true
	}

	var answers []int // sizes; 0 for a refusal
	for range 60 {
		resp, n, ok := ask()
		if !ok {
			break
		}
		switch {
		case resp.OK && len(resp.Declaration) > 0:
			answers = append(answers, n)
		case resp.Error != nil && resp.Error.Code == api.CodeUnavailable:
			answers = append(answers, 0)
		default:
			t.Fatalf("a repeated enrolment answered %+v (%d bytes)", resp.Error, n)
		}
	}
	// What the budget pays for: each repeat its request (one it cannot pay is
	// dropped, and the client disconnected), each answer its size on 3 connections
	// of 4 subscriptions each; a refused repeat costs its request only.
	size := answers[0]
	cost := float64(size * 3 * 4 / budgets.SyncAnswerBytes)
	var want []int
	for tokens := budgets.Burst; tokens >= 1; {
		tokens--
		if tokens >= cost {
			tokens -= cost
			want = append(want, size)
		} else {
			want = append(want, 0)
		}
	}
	t.Logf("repeats from a full budget, answers of %d bytes (%v messages each): %v", size, cost, answers)
	if cost < 5 {
		t.Fatalf("an answer of %d bytes costs %v messages: the test needs more", size, cost)
	}
	refusals := 0
	for _, n := range want {
		if n == 0 {
			refusals++
		}
	}
	if fmt.Sprint(answers) != fmt.Sprint(want) || refused() != uint64(refusals) {
		t.Fatalf("answers %v (%d refused), want %v", answers, refused(), want)
	}
	clock = clock.Add(time.Duration((cost + 1) / budgets.PerSecond * float64(time.Second)))
	if resp, _, ok := ask(); !ok || !resp.OK {
		t.Errorf("a repeat once the budget refilled: %v %+v", ok, resp.Error)
	}
}

// TestResendsArePaidForEveryCopy: a node that never acknowledges its declaration is
// re-sent it at every reconcile, on every subscription it holds. Each re-send is
// charged to its budget by the copies; one its budget cannot pay is skipped (a line,
// bounded), so the re-sends stop at the budget and go on at the rate it refills.
// Before, they were free: a node that only sent heartbeats received its declaration
// 64 times each round.
func TestResendsArePaidForEveryCopy(t *testing.T) {
	var log lockedBuffer
	// No reconcile of its own during the test: the rounds are the test's.
	d, err := Open(context.Background(), Options{Dir: bootstrapped(t, "resend"), Logger: slog.New(slog.NewTextHandler(&log, nil)),
		ReconcileInterval: 10 * time.Minute,
		Timeouts:          testTimeouts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	_, _, got, envelopes := heldBy(t, d, "evil", 4, 4)
	declareBytes(t, d, "evil", 200<<10)
	settled(got)
	clock := time.Now()
	d.guard.now = func() time.Time { return clock }
	budgets := d.guard.budgets

	// The declaration is behind from an interval after it was issued; the rounds
	// come 10 s apart from then, as by default.
	now := d.now().Add(d.opts.ReconcileInterval - 10*time.Second)
	// round runs a reconcile and returns the bytes and envelopes the node's
	// subscriptions received from it.
	round := func() (bytes, n int64) {
		b0, n0 := got.Load(), envelopes.Load()
		now = now.Add(10 * time.Second)
		d.seen.mark("evil", now) // it reports, and never acknowledges
		d.reconcile(now)
		n = settled(envelopes) - n0
		return got.Load() - b0, n
	}
	var sent []int64
	var paidRound int64
	for range 8 {
		b, n := round()
		sent = append(sent, n)
		paidRound = max(paidRound, b)
	}
	// A re-send is the keyring the node never acknowledged and its declaration, on
	// 4 connections of 4 subscriptions each.
	cost := float64(int(paidRound) / budgets.SyncAnswerBytes)
	want := int(budgets.Burst / cost) // the rounds a full budget pays for
	t.Logf("8 rounds, the budget's clock stopped: envelopes received %v, %d bytes a re-send (%v messages)", sent, paidRound, cost)
	if want < 1 || want >= 8 {
		t.Fatalf("a re-send of %d bytes costs %v messages: the test needs a budget that pays for some rounds and not all", paidRound, cost)
	}
	for i, n := range sent {
		if i < want && n != 2*16 || i >= want && n != 0 {
			t.Fatalf("round %d sent %d envelopes; want 32 (2 envelopes on 16 subscriptions) for the first %d rounds, which the budget pays for, then none: %v", i+1, n, want, sent)
		}
	}
	if n := strings.Count(log.String(), "re-sending skipped"); n != 1 {
		t.Errorf("%d lines about the skipped re-sends, want 1:\n%s", n, log.String())
	}
	clock = clock.Add(time.Duration(cost / budgets.PerSecond * float64(time.Second)))
	if _, n := round(); n != 32 {
		t.Errorf("once the budget refilled for one, a round sent %d envelopes, want 32", n)
	}
}

// TestAnAgentIsServedItsLargestDeclaration: charged for every copy it could hold, an
// agent as it runs (one connection, one subscription on its declaration subject)
// with a declaration as large as a declaration may be still has its syncs answered
// and its re-sends sent: from a full budget, a sync, a re-send, a report and a
// second sync at once (64 messages each answer, 195 of 200 in all).
func TestAnAgentIsServedItsLargestDeclaration(t *testing.T) {
	d, err := Open(context.Background(), Options{Dir: bootstrapped(t, "largest"), Logger: slog.New(slog.DiscardHandler),
		ReconcileInterval: 10 * time.Minute,
		Timeouts:          testTimeouts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	if err := d.serveAPI(); err != nil {
		t.Fatal(err)
	}
	conns, _, got, envelopes := heldBy(t, d, "big", 1, 1)
	nc := conns[0]
	// The most a body may be: signed, it must stay under the envelope's cap.
	declareBytes(t, d, "big", (declarations.MaxEnvelopeSize-8<<10)*3/4)
	settled(envelopes)
	largest := got.Load()
	if largest < declarations.MaxEnvelopeSize-64<<10 {
		t.Fatalf("the declaration's envelope is %d bytes; the test needs one near the cap (%d)", largest, declarations.MaxEnvelopeSize)
	}
	clock := time.Now()
	d.guard.now = func() time.Time { return clock }

	sync := func(what string) {
		t.Helper()
		n0 := envelopes.Load()
		req, _ := json.Marshal(api.SyncRequest{V: api.ProtocolVersion, KeyringEpoch: 1})
		m, err := nc.Request(api.SyncSubject("big"), req, 5*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		var resp api.SyncResponse
		if err := json.Unmarshal(m.Data, &resp); err != nil || resp.Error != nil || resp.Sent == 0 {
			t.Fatalf("%s answered %s", what, m.Data)
		}
		if n := settled(envelopes) - n0; n != int64(resp.Sent) {
			t.Fatalf("%s: %d envelopes arrived of %d sent", what, n, resp.Sent)
		}
	}
	sync("the first sync")
	n0 := envelopes.Load()
	now := d.now().Add(d.opts.ReconcileInterval)
	d.seen.mark("big", now)
	d.reconcile(now)
	if settled(envelopes) == n0 {
		t.Fatal("the re-send was not sent")
	}
	report, _ := json.Marshal(api.Status{V: api.ProtocolVersion, Node: "big"})
	if err := nc.Publish(api.StatusSubject("big"), report); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	sync("a second sync at once")
	if !nc.IsConnected() || len(d.guard.snapshot().Refused)+len(d.guard.snapshot().Kicked) > 0 {
		t.Errorf("the agent was refused or disconnected: %+v", d.guard.snapshot())
	}
}

// TestAKeySharedAnswerIsPaidFor: the answer to a status report naming the other
// connections that hold the node's key is paid for from the node's budget, as a
// sync's answer is: with the budget spent, it is not sent, and the refusal is
// counted. Before (a review), it was sent free to every subscription of every
// connection of the key, at the rate of the clones' reports.
func TestAKeySharedAnswerIsPaidFor(t *testing.T) {
	d := fleet(t, 0)
	// The answer, a few hundred bytes a copy, costs less than a unit of the
	// default budget on every copy together (paid for by its report); with a
	// smaller unit, it costs.
	d.guard.budgets.SyncAnswerBytes = 256
	if err := d.serveAPI(); err != nil {
		t.Fatal(err)
	}
	conns, key, _, _ := heldBy(t, d, "evil", 2, 1)
	var answers atomic.Int64
	for _, nc := range conns {
		for range 3 { // with heldBy's one, the broker's cap of 4 a connection
			if _, err := nc.Subscribe(api.NodeInbox("evil")+".status", func(*nats.Msg) { answers.Add(1) }); err != nil {
				t.Fatal(err)
			}
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	later := time.Now().Add(time.Hour) // both connections past the grace
	report := &nats.Msg{Subject: api.StatusSubject("evil"), Reply: api.NodeInbox("evil") + ".status"}
	d.tellKeyShared(report, "evil", key, later)
	waitFor(t, 5*time.Second, "the answer with a budget to pay it, a copy on each subscription", func() bool { return answers.Load() == 6 })
	for d.guard.spend("evil") {
	}
	refused := func() uint64 { return d.guard.snapshot().Refused[DropKey{Subject: "status", Reason: ReasonRate}] }
	before, sent := refused(), answers.Load()
	d.tellKeyShared(report, "evil", key, later)
	if err := conns[0].Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if answers.Load() != sent || refused() != before+1 {
		t.Fatalf("with the budget spent: %d more answers, %d refusals counted; want none and one", answers.Load()-sent, refused()-before)
	}
}
