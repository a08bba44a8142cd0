package integration

import (
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/controlplane/api"
	"mesh/controlplane/datadir"
	"mesh/controlplane/operator"
	"mesh/controlplane/pki"
	"mesh/integration/fleet"
	"mesh/integration/harness"
)

// TestRemovedControlNodesCredentialsCannotFlood: the operator credentials of a
// removed control node may still read, and a copy of the file sent those reads as
// fast as one connection could. They waited in the queue of every operator's
// requests: an operator's ping took 1.2 s, then 6.8 s, then timed out, other
// operators' requests were dropped from the full queue, and the leader, keeping
// each request's way back for two minutes, grew from 30 MB to 1.6 GB in 24 s. Now
// the reads are served in a queue of their own, under one budget, and past it
// every connection of those credentials is closed.
func TestRemovedControlNodesCredentialsCannotFlood(t *testing.T) {
	cp1 := harness.NewControlPlane(t, bin, "retflood")
	serve := cp1.Serve()
	cp2 := joinControl(t, cp1, "cp-2")
	if r := cp1.Ctl("control", "remove", "cp-2"); r.Code != 0 {
		t.Fatalf("control remove cp-2 (exit %d): %s", r.Code, r.Combined())
	}
	if code := cp2.Process().Wait(30 * time.Second); code != 6 {
		t.Fatalf("the removed node exited %d, want 6", code)
	}
	cfg, err := datadir.Dir(cp1.Dir).LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	pin, _ := cfg.Pin()
	creds := filepath.Join(cp2.Dir, datadir.AdminCredsFile)
	closed := make(chan struct{})
	old, err := nats.Connect("tls://"+cp1.Listen, append(operator.CredsLogin(creds, pki.PinnedClientConfig(pin), 10*time.Second),
		nats.NoReconnect(), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))...)
	if err != nil {
		t.Fatalf("the removed node's credentials: %v", err)
	}
	defer old.Close()
	// They still read.
	if _, err := operator.NewClient(old, 5*time.Second).Nodes(api.NodesRequest{}); err != nil {
		t.Fatalf("a read with the removed node's credentials: %v", err)
	}
	rssBefore, err := fleet.ProcRSS(serve.Pid())
	if err != nil {
		t.Fatal(err)
	}

	// The flood: pings as fast as the connection takes them, until it is closed.
	var sent atomic.Int64
	go func() {
		inbox := old.NewRespInbox()
		for {
			if err := old.PublishRequest(api.AdminSubject(api.OpPing), inbox, nil); err != nil {
				return
			}
			sent.Add(1)
		}
	}()
	started := time.Now()
	// Meanwhile an operator is answered at once, every time.
	var slowest time.Duration
	for time.Since(started) < 3*time.Second {
		t0 := time.Now()
		if r := cp1.Ctl("nodes"); r.Code != 0 {
			t.Fatalf("an operator's nodes during the flood: exit %d:\n%s", r.Code, r.Combined())
		}
		slowest = max(slowest, time.Since(t0))
	}
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatalf("the flooding connection is still open %v after it began (%d requests sent)", time.Since(started), sent.Load())
	}
	if slowest > 2*time.Second {
		t.Errorf("an operator's command took %v during the flood", slowest)
	}
	if n := cp1.Counter("mesh_control_budget_disconnects_total", "reason=rate"); n < 1 {
		t.Errorf("no disconnection for rate counted (%v)", n)
	}
	rssAfter, err := fleet.ProcRSS(serve.Pid())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d requests sent before the connection was closed; slowest operator command %v; serve RSS %d → %d MiB",
		sent.Load(), slowest, rssBefore>>20, rssAfter>>20)
	if grew := rssAfter - rssBefore; grew > 200<<20 {
		t.Errorf("serve grew by %d MiB during the flood", grew>>20)
	}
}
