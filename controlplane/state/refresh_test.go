package state

import (
	"slices"
	"testing"
	"time"
)

// TestDueForRefresh: a declaration is due once less than half its validity is left,
// and also once its issue time is more than StampAheadTolerance in the reader's future
// (a clock ahead stamped it); a refresh stamps it again with the command's time.
func TestDueForRefresh(t *testing.T) {
	m := enrolled(t, map[string]string{"web-1": RoleWorker, "web-2": RoleWorker, "web-3": RoleWorker})
	m.must(declareCmd(Selector{Nodes: []string{"web-1"}}, `{"files":[]}`, t0))
	// A leader three hours ahead declared for web-2; web-3's stamp is only minutes
	// ahead, as between control nodes whose clocks disagree by minutes.
	m.must(declareCmd(Selector{Nodes: []string{"web-2"}}, `{"files":[]}`, t0.Add(3*time.Hour)))
	m.must(declareCmd(Selector{Nodes: []string{"web-3"}}, `{"files":[]}`, t0.Add(StampAheadTolerance)))

	for _, tc := range []struct {
		now   time.Time
		due   []string
		ahead int
	}{
		{t0, []string{"web-2"}, 1},
		{t0.Add(testValidity/2 - time.Second), []string{"web-2"}, 1},
		{t0.Add(testValidity/2 + time.Second), []string{"web-1", "web-2"}, 1},
		{t0.Add(3*time.Hour - StampAheadTolerance), []string{"web-1", "web-3"}, 0},
	} {
		due, ahead := m.state().DueForRefresh(tc.now)
		if !slices.Equal(due, tc.due) || ahead != tc.ahead {
			t.Errorf("at t0+%s: due %v (%d ahead), want %v (%d ahead)", tc.now.Sub(t0), due, ahead, tc.due, tc.ahead)
		}
	}

	// The clock stepped back: the refresh stamps web-2 by it, and nothing is due after.
	m.must(Command{Op: OpRefresh, At: t0.Add(time.Minute), Refresh: &RefreshCmd{Nodes: []string{"web-2"}}})
	n := m.state().Nodes["web-2"]
	if !n.Declared.IssuedAt.Equal(t0.Add(time.Minute)) || !n.Declared.ExpiresAt.Equal(t0.Add(time.Minute+testValidity)) {
		t.Fatalf("after the refresh web-2 is issued %s, expires %s", n.Declared.IssuedAt, n.Declared.ExpiresAt)
	}
	if due, _ := m.state().DueForRefresh(t0.Add(time.Minute)); len(due) != 0 {
		t.Fatalf("due right after the refresh: %v", due)
	}
}
