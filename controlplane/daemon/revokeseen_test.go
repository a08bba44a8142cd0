package daemon

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/datadir"
	"mesh/controlplane/replication"
)

// testTimeouts are Raft's timeouts for a control node in a test: a one-voter
// cluster elects itself in a fraction of a second.
var testTimeouts = replication.Timeouts{Heartbeat: 300 * time.Millisecond, Election: 300 * time.Millisecond, LeaderLease: 150 * time.Millisecond, Commit: 5 * time.Millisecond}

// runUntilStopped opens and runs the control node of dir, its clock now; stop ends
// it (at most once, and at the test's end if the test did not).
func runUntilStopped(t *testing.T, dir datadir.Dir, now func() time.Time) (d *Daemon, stop func()) {
	t.Helper()
	return runDaemon(t, Options{Dir: dir, Now: now, ReadyTimeout: 20 * time.Second})
}

// runDaemon opens and runs a control node with opts (no log and testTimeouts unless
// given); stop ends it (at most once, and at the test's end if the test did not).
func runDaemon(t *testing.T, opts Options) (d *Daemon, stop func()) {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Timeouts == (replication.Timeouts{}) {
		opts.Timeouts = testTimeouts
	}
	d, err := Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := d.Run(ctx); err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
			d.Close()
		})
	}
	t.Cleanup(stop)
	return d, stop
}

// TestLastSeenOfANodeRevokedWhileConnected: a node connected and heard from an hour
// after its last report that changed something is revoked. LAST SEEN is when the
// leader last heard from it, kept in the state with the revocation, also after the
// control node restarts (nothing in its memory then). Before, the revocation forgot
// the leader's memory of it and the close of its connection was not recorded for a
// revoked node: LAST SEEN was its last report that changed something, an hour
// before it was last heard (a security audit: the figure an operator reads after
// revoking a suspect node).
func TestLastSeenOfANodeRevokedWhileConnected(t *testing.T) {
	dir := bootstrapped(t, "revokeseen")
	var ahead atomic.Int64 // the control node's clock, ahead of the real one by
	now := func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	d, stop := runUntilStopped(t, dir, now)
	const node = "web-1"
	nc := loggedInAs(t, d, node)
	key := d.fsmNode(t, node).PublicKey
	waitFor(t, 10*time.Second, "the brokers hold web-1's connection", func() bool { return d.presence.Open(key) == 1 })

	// Its first report changes the record; a heartbeat an hour later changes nothing.
	d.handleStatus(statusMsg(t, node, "meshhost/0.1.0"))
	d.status.flush()
	reported := d.fsmNode(t, node).Applied.ReportedAt
	if reported.IsZero() {
		t.Fatal("the first report was not committed")
	}
	ahead.Store(int64(time.Hour))
	d.handleStatus(statusMsg(t, node, "meshhost/0.1.0"))
	if _, pending := pendingAgent(d, node); pending {
		t.Fatal("a heartbeat that changes nothing is pending for the log")
	}
	heard, ok := d.seen.get(node)
	if !ok || heard.Sub(reported) < 59*time.Minute {
		t.Fatalf("web-1 heard at %v, its last report committed at %v; want an hour later", heard, reported)
	}
	heard = heard.UTC()

	ahead.Store(int64(time.Hour + time.Minute))
	res, err := d.revoke(api.RevokeRequest{Nodes: []string{node}})
	if err != nil || len(res.Revoked) != 1 || res.Revoked[0].Connections != 1 {
		t.Fatalf("revoke web-1: %+v, %v; want it revoked with its connection open", res, err)
	}
	waitFor(t, 10*time.Second, "web-1's connection closed after the revocation", func() bool { return nc.IsClosed() || d.presence.Open(key) == 0 })
	d.status.flush()
	lastSeen := func(d *Daemon, when string) {
		t.Helper()
		n := d.fsmNode(t, node)
		v := d.view(n, d.now(), 0)
		if v.State != api.StateRevoked {
			t.Fatalf("%s: web-1 is %s, want revoked", when, v.State)
		}
		if !v.LastSeen.Equal(heard) {
			t.Errorf("%s: web-1 last seen %v (its last report committed at %v), want %v, when it was last heard from", when, v.LastSeen, reported, heard)
		}
		if !n.LastSeen.Equal(heard) {
			t.Errorf("%s: the state records web-1 last seen %v, want %v", when, n.LastSeen, heard)
		}
	}
	lastSeen(d, "revoked")

	// A restart: the new leader remembers hearing from no one.
	stop()
	d, _ = runUntilStopped(t, dir, now)
	if _, ok := d.seen.get(node); ok {
		t.Fatal("the restarted control node remembers hearing from web-1")
	}
	lastSeen(d, "after a restart")
}
