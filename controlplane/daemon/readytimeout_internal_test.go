package daemon

import (
	"testing"
	"time"

	"mesh/controlplane/replication"
)

// TestTheWaitAtStartOutlastsTheFirstElection: a starting node waits for its state
// to be current for a minute, or for as long as a cold restart of every voter may
// take to hold its first election, which is longer with a slow Raft. With
// --raft-heartbeat 1m (the flag's most) no voter stood before a minute had passed,
// every voter gave up at a minute, and under systemd they failed together for good
// (a review, with three voters).
func TestTheWaitAtStartOutlastsTheFirstElection(t *testing.T) {
	for _, c := range []struct {
		heartbeat time.Duration
		atLeast   time.Duration
	}{{0, time.Minute}, {time.Second, time.Minute}, {30 * time.Second, 2 * time.Minute}, {time.Minute, 4 * time.Minute}} {
		o := Options{Timeouts: replication.Timeouts{Heartbeat: c.heartbeat, Election: c.heartbeat}}
		o.defaults()
		if o.ReadyTimeout < c.atLeast || o.ReadyTimeout < time.Minute {
			t.Errorf("heartbeat %s: waits %s at start, want at least %s", c.heartbeat, o.ReadyTimeout, c.atLeast)
		}
	}
	o := Options{ReadyTimeout: 5 * time.Second, Timeouts: replication.Timeouts{Heartbeat: time.Minute}}
	o.defaults()
	if o.ReadyTimeout != 5*time.Second {
		t.Errorf("a wait given: %s, want it kept", o.ReadyTimeout)
	}
}
