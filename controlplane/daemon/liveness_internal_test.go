package daemon

import (
	"strings"
	"testing"
	"time"

	"mesh/controlplane/state"
)

// TestTakeoverKeepsItsMonotonicReading: alive compares a node's last report with the
// time this node took over the lead; both must keep Go's monotonic reading, or a
// wall clock stepped back after the takeover counts a silent (half-open) host alive
// for as long as the step. Kept as unix nanoseconds before, the takeover lost it.
// (The step itself cannot be made in a test: time.Time's wall and monotonic readings
// move together under Add.)
func TestTakeoverKeepsItsMonotonicReading(t *testing.T) {
	l := newLiveness()
	if !l.since().IsZero() {
		t.Fatal("a node that never led has a takeover time")
	}
	at := time.Now()
	l.tookOver(at)
	got := l.since()
	if !got.Equal(at) || !strings.Contains(got.String(), " m=") {
		t.Fatalf("the takeover time is %s, want %s with its monotonic reading", got, at)
	}
}

// TestPutBacksFollowTheReports: what a node reports of the files its agent put back
// replaces what it reported before; a report of none (an agent restarted) and the
// node forgotten (revoked, enrolled again) leave nothing shown.
func TestPutBacksFollowTheReports(t *testing.T) {
	l := newLiveness()
	at := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	if _, ok := l.putBackOf("web-1"); ok {
		t.Fatal("a node that reported nothing shows files put back")
	}
	l.notePutBack("web-1", 2, at)
	l.notePutBack("web-1", 3, at.Add(time.Minute))
	if p, ok := l.putBackOf("web-1"); !ok || p.count != 3 || !p.at.Equal(at.Add(time.Minute)) {
		t.Fatalf("after two reports: %+v, %v", p, ok)
	}
	l.notePutBack("web-1", 0, time.Time{})
	if p, ok := l.putBackOf("web-1"); ok {
		t.Fatalf("after a report of none: %+v", p)
	}
	l.notePutBack("web-2", 1, at)
	l.forget("web-2")
	if p, ok := l.putBackOf("web-2"); ok {
		t.Fatalf("a node forgotten: %+v", p)
	}
}

// TestLastSeenIsTheLatestKnown: a control node that led before keeps what it heard
// then; leading again, it showed that, older than the time a leader since
// committed as the node went offline (a review of the change that records it). The
// latest of the two is shown.
func TestLastSeenIsTheLatestKnown(t *testing.T) {
	d := fleet(t, 1)
	now := d.now()
	d.seen.mark("n-0", now.Add(-time.Hour)) // heard while this node led, an hour ago
	if res, err := d.raft.Apply(state.Command{Op: state.OpStatus, Status: &state.StatusCmd{Seen: []state.SeenReport{{Node: "n-0", At: now.Add(-time.Minute)}}}}, time.Minute); err != nil || res.Err != nil {
		t.Fatal(err, res.Err)
	}
	n := d.fsmNode(t, "n-0")
	if v := d.view(n, now, 0); !v.LastSeen.Equal(n.LastSeen) {
		t.Errorf("LAST SEEN shows %v, want the committed %v", v.LastSeen, n.LastSeen)
	}
	// Heard from since: that is shown.
	d.seen.mark("n-0", now)
	if v := d.view(n, now, 0); !v.LastSeen.Equal(now.UTC()) {
		t.Errorf("LAST SEEN shows %v, want now, when it was last heard from", v.LastSeen)
	}
}
