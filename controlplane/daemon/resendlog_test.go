package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestResendingIsNotLoggedEveryRound: live nodes that stay behind for a reason
// re-sending does not cure (a clock an hour off, a cloned identity) are re-sent
// their declarations every reconcile for as long as it lasts. The line saying so
// came every round (8,640 identical lines a day at the default 10 s) naming no
// node. Now: the first round at once, naming the first nodes by id; then one line
// every 5 minutes with how many rounds it stands for. Over 100 rounds 10 s apart
// (16 minutes and a half), 4 lines.
func TestResendingIsNotLoggedEveryRound(t *testing.T) {
	var log lockedBuffer
	d, err := Open(context.Background(), Options{Dir: bootstrapped(t, "resend"), Logger: slog.New(slog.NewTextHandler(&log, nil)),
		Timeouts: testTimeouts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	var nodes []string
	for i := range 7 {
		node := fmt.Sprintf("web-%d", i)
		loggedInAs(t, d, node)
		nodes = append(nodes, node)
	}
	deadline := time.Now().Add(10 * time.Second)
	for d.presence.Count() < len(nodes) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d nodes connected", d.presence.Count(), len(nodes))
		}
		time.Sleep(10 * time.Millisecond)
	}
	now := d.now()
	const rounds = 100
	for range rounds {
		now = now.Add(d.opts.ReconcileInterval)
		for _, n := range nodes {
			d.seen.mark(n, now) // each reports, and stays behind
		}
		d.reconcile(now)
	}
	var lines []string
	for _, l := range strings.Split(log.String(), "\n") {
		if strings.Contains(l, "re-sending what live nodes have not acknowledged") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 4 {
		t.Fatalf("%d rounds of re-sending to %d nodes gave %d lines, want 4:\n%s", rounds, len(nodes), len(lines), strings.Join(lines, "\n"))
	}
	if !strings.Contains(lines[0], "nodes=7") || !strings.Contains(lines[0], "first=web-0,web-1,web-2,web-3,web-4 ") || !strings.Contains(lines[0], "count=1") {
		t.Errorf("the first line does not say how many nodes, name the first five, and count one round:\n%s", lines[0])
	}
	if !strings.Contains(lines[1], "count=30") {
		t.Errorf("the next line does not count the 30 rounds of the 5 minutes since:\n%s", lines[1])
	}
}
