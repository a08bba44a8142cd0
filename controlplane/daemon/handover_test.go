package daemon

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"mesh/controlplane/datadir"
	"mesh/controlplane/join"
	"mesh/controlplane/replication"
	"mesh/integration/freeport"
)

// serveNode opens and runs the control node of dir, its clock now, until the test
// ends.
func serveNode(t *testing.T, dir datadir.Dir, log *slog.Logger, now func() time.Time) *Daemon {
	t.Helper()
	d, err := Open(context.Background(), Options{Dir: dir, Logger: log, Now: now,
		Timeouts: testTimeouts})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := d.Run(ctx); err != nil {
			t.Errorf("%s: %v", d.cfg.Node, err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		d.Close()
	})
	return d
}

// joinNode mints, on the control node of from, a control token for node on free
// loopback ports, joins node with it into a new data directory and serves it.
func joinNode(t *testing.T, from datadir.Dir, node string, log *slog.Logger) *Daemon {
	t.Helper()
	addrs := freeport.Addrs(t, 3)
	tok, _, err := join.Mint(from, join.MintOptions{Node: node, Broker: addrs[0], Raft: addrs[1], Cluster: addrs[2], TTL: time.Hour})
	if err != nil {
		t.Fatalf("mint a control token for %s: %v", node, err)
	}
	dir := datadir.Dir(filepath.Join(t.TempDir(), node))
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := join.Join(ctx, join.Options{Dir: dir, Token: tok.Encode(), Out: &out, Logger: slog.New(slog.DiscardHandler),
		Timeouts: replication.Timeouts{Heartbeat: 300 * time.Millisecond, Election: 300 * time.Millisecond, LeaderLease: 150 * time.Millisecond, Commit: 50 * time.Millisecond}}); err != nil {
		t.Fatalf("join %s: %v\n%s", node, err, out.String())
	}
	return serveNode(t, dir, log.With("node", node), time.Now)
}

// waitFor polls cond until it holds, or fails the test after limit saying what.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", limit, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestLeaderWithAClockAheadHandsOver: three control nodes in one process, all
// voters, the bootstrap node leading; its clock is set two hours ahead. Before, it
// kept leading, every node logged that clocks disagreed, and hosts refused what it
// stamped (not_yet_valid). Now it sees the two others agree with each other and not
// with it, hands leadership to one of them, says so with the fix, and a node with a
// right clock leads.
func TestLeaderWithAClockAheadHandsOver(t *testing.T) {
	var logs lockedBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var skew atomic.Int64
	dir1 := bootstrapped(t, "clocks")
	d1 := serveNode(t, dir1, log.With("node", "cp-1"), func() time.Time { return time.Now().Add(time.Duration(skew.Load())) })
	waitFor(t, 30*time.Second, "cp-1 leads", d1.raft.IsLeader)
	d2 := joinNode(t, dir1, "cp-2", log)
	d3 := joinNode(t, dir1, "cp-3", log)
	voters := func() int {
		members, _ := d1.raft.Members()
		n := 0
		for _, m := range members {
			if m.Voter {
				n++
			}
		}
		return n
	}
	waitFor(t, 30*time.Second, "three voters", func() bool { return voters() == 3 })
	if !d1.raft.IsLeader() {
		t.Fatalf("cp-1 does not lead with three voters (leader %q)", d1.raft.Leader())
	}

	skew.Store(int64(2 * time.Hour))
	byRightClock := func() bool { return d2.raft.IsLeader() || d3.raft.IsLeader() }
	waitFor(t, 20*time.Second, "a node with a right clock leads", byRightClock)
	const said = "this control node leads with a clock off every other voter's, and theirs agree: it hands leadership to one of them"
	got := logs.String()
	var line string
	for _, l := range strings.Split(got, "\n") {
		if strings.Contains(l, said) {
			line = l
			break
		}
	}
	if line == "" {
		t.Fatalf("cp-1 did not say why it handed over:\n%s", got)
	}
	t.Log(line)
	for _, want := range []string{"node=cp-1", "level=WARN", "fix NTP on this machine", "ahead_by=2h0m", "other_clocks=\"cp-2 ", ", cp-3 ", "to=cp-"} {
		if !strings.Contains(line, want) {
			t.Errorf("the handover line lacks %q: %s", want, line)
		}
	}
	// It stays with the right clocks: the new leader sees one voter off and one
	// agreeing, and does nothing.
	time.Sleep(3 * HeartbeatInterval)
	if d1.raft.IsLeader() || !byRightClock() {
		t.Fatalf("leadership did not stay with a right clock: cp-1 leads %v, cp-2 %v, cp-3 %v", d1.raft.IsLeader(), d2.raft.IsLeader(), d3.raft.IsLeader())
	}
	if !strings.Contains(logs.String(), "leadership handed over") {
		t.Errorf("cp-1 did not say the handover completed:\n%s", logs.String())
	}
	if n := strings.Count(logs.String(), said); n != 1 {
		t.Fatalf("%d handovers, want one:\n%s", n, logs.String())
	}
}
