package daemon

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
)

// TestASyncAnswerIsPaidForBySize: what a sync's answer sends costs the node a
// message of its budget for each SyncAnswerBytes, all or nothing, never more than a
// full budget less the request and answerReserve; the budget refills as for messages.
func TestASyncAnswerIsPaidForBySize(t *testing.T) {
	clock := time.Now()
	g := newGuard(slog.New(slog.DiscardHandler), func() time.Time { return clock }, Budgets{})
	unit := g.budgets.SyncAnswerBytes
	for size, want := range map[int]float64{0: 0, 300: 0, unit - 1: 0, unit: 1, 16 * unit: 16, 4 << 20: 64, 1 << 30: g.budgets.Burst - 1 - answerReserve} {
		if got := g.answerCost(size); got != want {
			t.Errorf("an answer of %d bytes costs %v messages, want %v", size, got, want)
		}
	}
	// A 1 MiB declaration, 4 copies (64 messages), plus its request: three
	// answers of a full budget of 200, then none until it refills; the requests
	// refused an answer cost one message each.
	answered := 0
	for range 5 {
		if g.spend("n-0") && g.spendN("n-0", g.answerCost(4<<20)) {
			answered++
		}
	}
	if answered != 3 {
		t.Errorf("%d answers of 4 MiB from a full budget, want 3", answered)
	}
	if g.spendN("n-0", 64) {
		t.Error("an answer was paid for from a spent budget")
	}
	if !g.spend("n-0") {
		t.Error("a refused answer took the messages it could not pay for: the request after it has none")
	}
	clock = clock.Add(4 * time.Second) // 80 messages refilled
	if !g.spendN("n-0", 64) {
		t.Error("the refilled budget does not pay for an answer")
	}
}

// TestRevokedSyncsArePaidForByNotices: a revoked key's sync is answered with a
// signed notice for each time its node id was revoked; each beyond the first costs
// the id's revoked budget a message, so an id revoked 41 times costs 41 messages a sync:
// four are answered from a full budget (200), then refused (unavailable, counted)
// until it refills; not 200 syncs of 41 signatures each.
func TestRevokedSyncsArePaidForByNotices(t *testing.T) {
	d := fleet(t, 1)
	const node = "n-0"
	for i := range 41 {
		kp, _ := nkeys.CreateUser()
		pub, _ := kp.PublicKey()
		id := fmt.Sprintf("%064x", i+1)
		for _, c := range []state.Command{
			{Op: state.OpRevoke, Revoke: &state.RevokeCmd{Node: node}},
			{Op: state.OpCreateToken, CreateToken: &state.CreateTokenCmd{ID: id, Node: node, Role: state.RoleWorker, TTL: time.Hour}},
			{Op: state.OpEnrol, Enrol: &state.EnrolCmd{TokenID: id, Node: node, Role: state.RoleWorker, PublicKey: pub}},
		} {
			if res, err := d.raft.Apply(c, time.Minute); err != nil || res.Err != nil {
				t.Fatalf("%s %d: %v %v", c.Op, i, err, res.Err)
			}
		}
	}
	if n := len(d.fsm.Revocations(node)); n != 41 {
		t.Fatalf("%d revocations of %s, want 41", n, node)
	}
	clock := time.Now()
	d.guard.now = func() time.Time { return clock }
	refused := func() uint64 { return d.guard.snapshot().Refused[DropKey{Subject: "revoked_sync", Reason: ReasonRate}] }
	msg := &nats.Msg{Subject: api.SyncSubject(node), Reply: api.NodeInbox(node) + ".x", Data: []byte(`{"v":2}`)}
	for i := range 6 {
		d.handleRevokedSync(msg)
		if got, want := refused(), uint64(max(0, i-3)); got != want {
			t.Fatalf("after sync %d: %d refused, want %d (each answered costs 41 of 200)", i+1, got, want)
		}
	}
	clock = clock.Add(2 * time.Second) // 40 refilled, to 74
	d.handleRevokedSync(msg)
	if got := refused(); got != 2 {
		t.Fatalf("a sync once the budget refilled was refused (%d refused)", got)
	}

	// An agent that names its key (leak audit, finding 2) is sent its own
	// notice alone, one signature, and costs the budget one message: the 33 left
	// pay for 33 such syncs, where one of the agent before took 41.
	key := d.fsm.Revocations(node)[17].Key
	named := &nats.Msg{Subject: msg.Subject, Reply: msg.Reply, Data: []byte(`{"v":2,"key":"` + key + `"}`)}
	for i := range 33 {
		d.handleRevokedSync(named)
		if got := refused(); got != 2 {
			t.Fatalf("sync %d of 33 naming its key was refused (%d refused, 2 before): it was charged for every notice of the id", i+1, got)
		}
	}
	dropped := func() uint64 { return d.guard.snapshot().Dropped[DropKey{Subject: "revoked_sync", Reason: ReasonRate}] }
	before := dropped()
	d.handleRevokedSync(named)
	if got := dropped(); got != before+1 {
		t.Fatalf("a sync naming its key past the budget: %d dropped, want %d", got, before+1)
	}
}
