package daemon

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestControlNodeClockOffIsReported: a control node whose clock, as its heartbeats
// carry it, is more than the tolerance off this node's is named in the log, ahead or
// behind, by how much; again every clockReportEvery while it stays off or at once if
// it moves by more than the tolerance, and once when it agrees again. Minutes off,
// and nodes too old to send their clock, say nothing.
func TestControlNodeClockOffIsReported(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	c := newControlTracker()
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	lines := func() []string {
		s := strings.TrimSpace(buf.String())
		buf.Reset()
		if s == "" {
			return nil
		}
		return strings.Split(s, "\n")
	}
	// step: a heartbeat with clock theirs arrives at ours; want is what the one
	// line logged says (none: nothing logged).
	step := func(what string, theirs, ours time.Time, want ...string) {
		t.Helper()
		c.checkClock(log, "cp-2", theirs, ours)
		got := lines()
		if len(want) == 0 {
			if len(got) != 0 {
				t.Fatalf("%s: logged %q, want nothing", what, got)
			}
			return
		}
		if len(got) != 1 {
			t.Fatalf("%s: logged %q, want one line saying %q", what, got, want)
		}
		for _, w := range append(want, "node=cp-2") {
			if !strings.Contains(got[0], w) {
				t.Fatalf("%s: logged %q, want it to say %q", what, got[0], w)
			}
		}
	}
	step("an older node, no clock", time.Time{}, t0)
	step("four minutes ahead", t0.Add(4*time.Minute), t0)
	step("three hours ahead", t0.Add(3*time.Hour), t0, "is ahead of this node's", "ahead_by=3h0m0s")
	step("still, a heartbeat later", t0.Add(3*time.Hour+2*time.Second), t0.Add(2*time.Second))
	step("still, ten minutes later", t0.Add(3*time.Hour+10*time.Minute), t0.Add(10*time.Minute), "ahead_by=3h0m0s")
	step("stepped to two hours behind", t0.Add(9*time.Minute), t0.Add(2*time.Hour+10*time.Minute), "is behind this node's", "behind_by=2h1m0s")
	step("set right", t0.Add(12*time.Minute), t0.Add(12*time.Minute), "agrees with this node's again")
	step("still right", t0.Add(13*time.Minute), t0.Add(13*time.Minute))
}
