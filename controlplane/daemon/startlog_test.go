package daemon

import (
	"strings"
	"testing"
	"time"
)

// TestAHealthyStartLogsNoWarning: a control node that starts alone, becomes leader
// and serves logs no warning or error, so that an alert on WARN does not fire at
// every restart. Raft's election at start and nats-server's note that clients must
// speak TLS first were both warnings before.
func TestAHealthyStartLogsNoWarning(t *testing.T) {
	var log lockedBuffer
	d := loggedDaemon(t, &log, nil)
	deadline := time.Now().Add(10 * time.Second)
	for !d.raft.IsLeader() {
		if time.Now().After(deadline) {
			t.Fatalf("no leader after 10 s:\n%s", log.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // what follows leadership (the API, the first heartbeat) logs too
	for line := range strings.Lines(log.String()) {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			t.Errorf("a healthy start logged: %s", strings.TrimSpace(line))
		}
	}
	if !strings.Contains(log.String(), "Server is ready") {
		t.Fatalf("the broker's start is not in the log; the test reads the wrong log:\n%s", log.String())
	}
}
