package daemon

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/controlplane/api"
)

// TestTheSweepForgetsClosedShutOutConnections (a leak review): the connections of
// revoked keys and retired credentials are followed by trackers of their own,
// whose closed connections went only as the next close in that account came, weeks
// later perhaps, and no figure counted them. The sweep expires them, and
// mesh_control_memory_entries counts them (shut_out_connections).
func TestTheSweepForgetsClosedShutOutConnections(t *testing.T) {
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	d, err := Open(context.Background(), Options{Dir: bootstrapped(t, "shutout"), Logger: slog.New(slog.DiscardHandler), Timeouts: testTimeouts, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	go d.Run(t.Context())
	if err := d.raft.WaitReady(t.Context()); err != nil {
		t.Fatal(err)
	}
	kp := enrolledKey(t, d, "gone")
	if _, err := d.revoke(api.RevokeRequest{Node: "gone"}); err != nil {
		t.Fatal(err)
	}
	closed := func() (n int) {
		for _, tr := range d.shutOut {
			_, c := tr.Remembered()
			n += c
		}
		return n
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(); {
			if time.Now().After(deadline) {
				t.Fatalf("%s: shut_out_connections %d, of which closed %d", what, d.memoryEntries()[tableShutOut], closed())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	pub, _ := kp.PublicKey()
	nc, err := nats.Connect("", nats.InProcessServer(d.broker.InProcess()), nats.CustomInboxPrefix(api.NodeInbox("gone")), nats.NoReconnect(),
		nats.Nkey(pub, func(nonce []byte) ([]byte, error) { return kp.Sign(nonce) }))
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	offset.Store(int64(time.Second))
	// Counted in the figures with what is open (the control node's own connection
	// in the account of revoked keys, which sends them their notices, among them).
	waitFor("the revoked key's closed connection remembered and counted", func() bool {
		return closed() == 1 && d.memoryEntries()[tableShutOut] >= 1
	})
	offset.Store(int64(3 * time.Minute))
	d.sweep()
	if n := closed(); n != 0 {
		t.Fatalf("after a sweep past the closed connections' two minutes: %d closed remembered, want 0", n)
	}
}
