package daemon

import (
	"log/slog"
	"maps"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/controlplane/state"
)

// TestSweepForgetsRevokedNodesAndFullBudgets: a sweep drops the budgets refilled to
// full (a node's, an enrolling client's) and keeps those still spent; it drops the
// liveness and the envelope of a node revoked, and keeps a live node's. Before, the
// guard kept a budget for every node and every enrolment ever made, and the signer an
// envelope for every node revoked.
func TestSweepForgetsRevokedNodesAndFullBudgets(t *testing.T) {
	d := fleet(t, 2)
	clock := time.Now()
	d.guard.now = func() time.Time { return clock }
	for _, key := range []string{"n-0", "n-1", enrolBudgetKey + "tmp-1.UKEY"} {
		if !d.guard.spend(key) {
			t.Fatalf("%s: no budget for a first message", key)
		}
	}
	for _, node := range []string{"n-0", "n-1"} {
		d.seen.mark(node, clock)
		d.signer.mu.Lock()
		d.signer.cache[node] = signed{version: 1, envelope: []byte("envelope")}
		d.signer.mu.Unlock()
	}
	if res, err := d.raft.Apply(state.Command{Op: state.OpRevoke, At: clock, Revoke: &state.RevokeCmd{Node: "n-1"}}, time.Minute); err != nil || res.Err != nil {
		t.Fatalf("revoke: %v %v", err, res.Err)
	}
	entries := func() map[string]int {
		n := d.memoryEntries()
		return map[string]int{tableBudgets: n[tableBudgets], tableLiveness: n[tableLiveness], tableEnvelopes: n[tableEnvelopes]}
	}
	d.sweep()
	if got, want := entries(), map[string]int{tableBudgets: 3, tableLiveness: 1, tableEnvelopes: 1}; !maps.Equal(got, want) {
		t.Fatalf("a sweep with the budgets spent a moment ago and n-1 revoked: %v, want %v", got, want)
	}
	if _, ok := d.seen.get("n-0"); !ok {
		t.Fatal("the sweep forgot the live node's liveness")
	}
	// A second on, every budget has refilled: each is what a fresh one would be.
	clock = clock.Add(time.Second)
	d.sweep()
	if got, want := entries(), map[string]int{tableBudgets: 0, tableLiveness: 1, tableEnvelopes: 1}; !maps.Equal(got, want) {
		t.Fatalf("a sweep with every budget refilled: %v, want %v", got, want)
	}
}

// TestSweepForgetsLineKindsDone: a kind of log line the guard limits is forgotten once
// its interval has passed with nothing held back (its next line is logged at once
// either way), and kept while a count waits to be reported. connError's kinds name
// the subscription, and some are inboxes made afresh: before, each stayed for good.
func TestSweepForgetsLineKindsDone(t *testing.T) {
	clock := time.Now()
	g := newGuard(slog.New(slog.DiscardHandler), func() time.Time { return clock }, Budgets{})
	g.connError("events", &nats.Subscription{Subject: "_INBOX.once"}, nats.ErrSlowConsumer)
	g.connError("events", &nats.Subscription{Subject: "_INBOX.twice"}, nats.ErrSlowConsumer)
	g.connError("events", &nats.Subscription{Subject: "_INBOX.twice"}, nats.ErrSlowConsumer) // held back
	clock = clock.Add(g.interval)
	g.sweep()
	if len(g.logged) != 1 || len(g.since) != 1 {
		t.Fatalf("after the interval the guard remembers %d kinds (%d counts), want 1: the one with a line held back", len(g.logged), len(g.since))
	}
	g.connError("events", &nats.Subscription{Subject: "_INBOX.twice"}, nats.ErrSlowConsumer) // logged, with the count
	clock = clock.Add(g.interval)
	g.sweep()
	if len(g.logged) != 0 || len(g.since) != 0 {
		t.Fatalf("with nothing held back the guard still remembers %d kinds (%d counts)", len(g.logged), len(g.since))
	}
}
