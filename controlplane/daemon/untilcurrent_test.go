package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/hashicorp/raft"

	"mesh/controlplane/replication"
)

// TestUntilCurrent: a new leader whose first barrier times out (a loaded node) tries
// again while it leads and then serves the API; before, it gave up and served no API
// until the next change of leader. One that lost the leadership does not serve.
func TestUntilCurrent(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	leads := func() bool { return true }

	calls := 0
	barrier := func() error {
		calls++
		if calls < 3 {
			return raft.ErrEnqueueTimeout
		}
		return nil
	}
	if serve := untilCurrent(ctx, barrier, leads, 0, log); !serve || calls != 3 {
		t.Fatalf("two barriers timed out, the third passed: serve %v after %d tries, want true after 3", serve, calls)
	}

	calls = 0
	notLeader := func() error { calls++; return fmt.Errorf("%w: %w", replication.ErrNotLeader, raft.ErrLeadershipLost) }
	if untilCurrent(ctx, notLeader, leads, 0, log) || calls != 1 {
		t.Fatalf("leadership lost during the barrier: served, or tried %d times", calls)
	}

	calls = 0
	timesOut := func() error { calls++; return raft.ErrEnqueueTimeout }
	stepsDown := func() bool { return calls < 2 }
	if untilCurrent(ctx, timesOut, stepsDown, 0, log) || calls != 2 {
		t.Fatalf("stepped down while trying: served, or tried %d times, want 2", calls)
	}

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if untilCurrent(cancelled, func() error { return errors.New("shut down") }, leads, 0, log) {
		t.Fatal("served after the node was asked to stop")
	}
}
