package daemon

import (
	"strings"
	"testing"
	"time"
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
