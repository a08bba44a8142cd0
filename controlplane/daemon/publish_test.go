package daemon

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"mesh/controlplane/api"
	"mesh/controlplane/replication"
	"mesh/controlplane/state"
)

// lockedBuffer is a log the daemon's goroutines write to while a test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// loggedDaemon is a single control node logging to log, with nodes enrolled.
func loggedDaemon(t *testing.T, log *lockedBuffer, nodes []string) *Daemon {
	t.Helper()
	dir := bootstrapped(t, "logs")
	d, err := Open(context.Background(), Options{Dir: dir, Logger: slog.New(slog.NewTextHandler(log, nil)),
		Timeouts: replication.Timeouts{Heartbeat: 300 * time.Millisecond, Election: 300 * time.Millisecond, LeaderLease: 150 * time.Millisecond, Commit: 5 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	for i, node := range nodes {
		kp, _ := nkeys.CreateUser()
		pub, _ := kp.PublicKey()
		id := hex.EncodeToString([]byte(fmt.Sprintf("%032d", i)))
		for _, c := range []state.Command{
			{Op: state.OpCreateToken, CreateToken: &state.CreateTokenCmd{ID: id, Node: node, Role: state.RoleWorker, TTL: time.Hour}},
			{Op: state.OpEnrol, Enrol: &state.EnrolCmd{TokenID: id, Node: node, Role: state.RoleWorker, PublicKey: pub}},
		} {
			if res, err := d.raft.Apply(c, time.Minute); err != nil || res.Err != nil {
				t.Fatalf("seed %s: %v %v", node, err, res.Err)
			}
		}
	}
	return d
}

// TestFanoutNotSentIsOneLine: a declaration to many nodes that the broker does not
// take (the control plane's own connection closed under it) is one warning saying
// how many nodes did not get it and why, not one line per node: a fleet of 10,000
// wrote 10,000 lines.
func TestFanoutNotSentIsOneLine(t *testing.T) {
	var log lockedBuffer
	var nodes []string
	for i := range 40 {
		nodes = append(nodes, fmt.Sprintf("n-%d", i))
	}
	d := loggedDaemon(t, &log, nodes)
	d.conns.publisher.Close()
	d.publishDeclarations(nodes)
	lines := strings.Count(log.String(), "not sent; the node")
	if lines != 1 {
		t.Fatalf("a fan-out to %d nodes not sent gave %d lines, want 1:\n%.3000s", len(nodes), lines, log.String())
	}
	if !strings.Contains(log.String(), fmt.Sprintf("nodes=%d", len(nodes))) || !strings.Contains(log.String(), "connection closed") {
		t.Fatalf("the line does not say how many nodes, and why:\n%.3000s", log.String())
	}
}

// TestSyncsNotAnsweredLogBounded: a fleet syncing (every host after a control node
// restarts) while the control plane's connections cannot send gives a line every
// interval with how many, not a line (or two) per host.
func TestSyncsNotAnsweredLogBounded(t *testing.T) {
	var log lockedBuffer
	var nodes []string
	for i := range 40 {
		nodes = append(nodes, fmt.Sprintf("n-%d", i))
	}
	d := loggedDaemon(t, &log, nodes)
	d.conns.publisher.Close()
	d.conns.hosts.Close()
	req, _ := json.Marshal(api.SyncRequest{V: api.ProtocolVersion})
	for _, n := range nodes {
		d.handleSync(&nats.Msg{Subject: api.SyncSubject(n), Reply: api.NodeInbox(n) + ".r1", Data: req})
	}
	for _, msg := range []string{"sync: envelope not sent", "sync reply not sent"} {
		if lines := strings.Count(log.String(), msg); lines != 1 {
			t.Errorf("%d syncs not answered gave %d lines %q, want 1:\n%.3000s", len(nodes), lines, msg, log.String())
		}
	}
}
