package integration

import (
	"syscall"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/integration/harness"
)

// TestLastSeenOfAnOfflineHostOutlivesARestart: a host heard from every second, its
// reports unchanged (nothing goes through the log for them), stops; the control
// node is killed and started again. LAST SEEN is still when the host was last
// heard from, recorded as its connection closed, not when its last report that
// changed something was committed (its first, seconds earlier), which is all the
// state held before.
func TestLastSeenOfAnOfflineHostOutlivesARestart(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "lastseen")
	cp.Serve()
	h := harness.NewHost(t, bin, "web-1")
	if r := h.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	h.Run()
	var first time.Time
	harness.Eventually(t, 20*time.Second, "web-1 is alive", func() bool {
		n, ok := cp.Node("web-1")
		first = n.LastSeen
		return ok && n.State == api.StateAlive && !first.IsZero()
	})
	// Heartbeats, none of which changes what the state holds of web-1.
	var heard time.Time
	harness.Eventually(t, 30*time.Second, "web-1 heard from 4s after its first report", func() bool {
		n, _ := cp.Node("web-1")
		heard = n.LastSeen
		return heard.Sub(first) >= 4*time.Second
	})
	h.Process().Signal(syscall.SIGTERM)
	if code := h.Process().Wait(15 * time.Second); code != 0 {
		t.Fatalf("meshhost run exited %d on SIGTERM:\n%s", code, h.Process().Output())
	}
	var offline api.NodeView
	harness.Eventually(t, 20*time.Second, "web-1 is offline", func() bool {
		offline, _ = cp.Node("web-1")
		return offline.State == api.StateOffline
	})
	if offline.LastSeen.Before(heard) {
		t.Fatalf("web-1 offline, last seen %v, before it was last seen alive at %v", offline.LastSeen, heard)
	}
	// The status flush (200 ms) commits the time; a second is ample.
	time.Sleep(time.Second)
	cp.Process().Kill()
	cp.Serve()
	n, ok := cp.Node("web-1")
	if !ok || n.State != api.StateOffline {
		t.Fatalf("after the restart web-1 is %+v, want offline", n)
	}
	if !n.LastSeen.Equal(offline.LastSeen) {
		t.Errorf("after the restart web-1 was last seen %v (%v before the time it was last heard from, %v), want that time: it was heard from %v after its first report",
			n.LastSeen, offline.LastSeen.Sub(n.LastSeen), offline.LastSeen, offline.LastSeen.Sub(first))
	}
}
