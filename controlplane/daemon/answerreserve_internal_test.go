package daemon

import (
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/controlplane/api"
)

// TestAnAnswerLeavesRoomForTheNextReport: an honest agent's two connections (a
// reconnection whose old connection has not been seen to end, or a clone pair), each
// with the one subscription an agent holds on its declaration subject, and a large
// declaration. A sync's answer is paid for from the budget whose emptiness means a
// flood: an answer that left less than one message had the agent's very next report
// (the one it sends after applying) disconnect the node and cool its key down (a
// review). An answer leaves answerReserve.
func TestAnAnswerLeavesRoomForTheNextReport(t *testing.T) {
	d := fleet(t, 0)
	if err := d.serveAPI(); err != nil {
		t.Fatal(err)
	}
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	d.guard.now = func() time.Time { return time.Unix(0, clock.Load()) }
	kp := enrolledKey(t, d, "web")
	key, _ := kp.PublicKey()
	var conns []*nats.Conn
	for range 2 {
		nc := dialAs(t, d, "web", kp)
		if _, err := nc.Subscribe(api.DeclarationSubject("web"), func(*nats.Msg) {}); err != nil {
			t.Fatal(err)
		}
		nc.Flush()
		conns = append(conns, nc)
	}
	for d.presence.Open(key) < 2 {
		time.Sleep(10 * time.Millisecond)
	}
	declareBytes(t, d, "web", 700<<10)
	tokens := func() float64 {
		d.guard.mu.Lock()
		defer d.guard.mu.Unlock()
		if b := d.guard.buckets["web"]; b != nil {
			return b.tokens
		}
		return d.guard.budgets.Burst
	}
	req, _ := json.Marshal(api.SyncRequest{V: api.ProtocolVersion, KeyringEpoch: 1})
	sync := func() api.SyncResponse {
		m, err := conns[0].Request(api.SyncSubject("web"), req, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var r api.SyncResponse
		_ = json.Unmarshal(m.Data, &r)
		return r
	}
	before := tokens()
	r := sync()
	cost := before - 1 - tokens()
	t.Logf("first sync: sent %d, error %v; answer cost %.0f messages (tokens %.1f -> %.1f)", r.Sent, r.Error, cost, before, tokens())
	// The agent's next sync (a retry, a reconnection) comes when the bucket holds
	// cost+1.5: what a refill at 20/s passes through on its way up.
	need := cost + 1.5 - tokens()
	clock.Add(int64(need / d.guard.budgets.PerSecond * float64(time.Second)))
	r = sync()
	t.Logf("second sync: sent %d, error %v; tokens left %.2f", r.Sent, r.Error, tokens())
	// The report an agent sends after applying what it was sent.
	st, _ := json.Marshal(api.Status{V: api.ProtocolVersion, Node: "web"})
	if err := conns[0].Publish(api.StatusSubject("web"), st); err != nil {
		t.Fatal(err)
	}
	conns[0].Flush()
	time.Sleep(500 * time.Millisecond)
	kicks := d.guard.snapshot().Kicked[ReasonRate]
	t.Logf("disconnections for the rate: %d; connections open: %d; conn0 connected=%v", kicks, d.presence.Open(key), conns[0].IsConnected())
	if kicks > 0 {
		t.Errorf("an honest agent's one report after two syncs was taken for a flood: %d disconnection(s), its key cooled down", kicks)
	}
}
