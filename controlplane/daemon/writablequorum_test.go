package daemon

import (
	"strings"
	"testing"
	"time"

	"mesh/controlplane/api"
)

// TestNoWritableQuorumIsSaid (audit of backup and restore, finding 6): with one voter
// stopped and another's disk full, the leader took changes that waited out meshctl's
// --timeout and were carried out a minute later, once there was room. While a voter
// says it cannot write its Raft log and too few others can, a change is refused at
// once, naming them; a voter merely silent is Raft's own lease to judge.
func TestNoWritableQuorumIsSaid(t *testing.T) {
	now := time.Now()
	beats := map[string]api.ControlHeartbeat{}
	at := map[string]time.Time{}
	last := func(id string) (api.ControlHeartbeat, time.Time, bool) {
		t, ok := at[id]
		return beats[id], t, ok
	}
	three := []string{"cp-1", "cp-2", "cp-3"}
	heard := func(id string, failing bool, ago time.Duration) {
		beats[id], at[id] = api.ControlHeartbeat{Node: id, LogWriteFailing: failing}, now.Add(-ago)
	}
	heard("cp-2", false, time.Second)
	heard("cp-3", false, time.Second)
	if why := unwritable(three, "cp-1", false, last, now); why != "" {
		t.Fatalf("every voter writes: %q", why)
	}
	heard("cp-3", true, time.Second)
	if why := unwritable(three, "cp-1", false, last, now); why != "" {
		t.Fatalf("two of three write: %q", why)
	}
	heard("cp-2", false, time.Minute) // stopped
	why := unwritable(three, "cp-1", false, last, now)
	if !strings.Contains(why, "1 of 3 voters can write their Raft log, and a commit needs 2") || !strings.Contains(why, "cp-2 (not heard)") || !strings.Contains(why, "cp-3 (cannot write its Raft log)") {
		t.Fatalf("one stopped, one full: %q", why)
	}
	heard("cp-3", false, time.Second)
	if why := unwritable(three, "cp-1", false, last, now); why != "" {
		t.Fatalf("one stopped, none says it cannot write: %q (Raft's lease judges)", why)
	}
	if why := unwritable([]string{"cp-1"}, "cp-1", true, last, now); !strings.Contains(why, "0 of 1 voters") {
		t.Fatalf("a single voter whose disk is full: %q", why)
	}
}
