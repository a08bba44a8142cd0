package state

import (
	"slices"
	"testing"
	"time"
)

// TestDueForRefresh: a declaration is due once less than half its validity is left,
// and also once its issue time is more than StampAheadTolerance in the reader's future
// (a clock ahead stamped it); a refresh stamps it again with the command's time. One
// issued more than the validity in the reader's future is not due but behind: stamped
// again, it would expire before it was issued.
func TestDueForRefresh(t *testing.T) {
	m := enrolled(t, map[string]string{"web-1": RoleWorker, "web-2": RoleWorker, "web-3": RoleWorker, "web-4": RoleWorker})
	m.must(declareCmd(Selector{Nodes: []string{"web-1"}}, `{"files":[]}`, t0))
	// A leader 50 minutes ahead declared for web-2; web-3's stamp is only minutes
	// ahead, as between control nodes whose clocks disagree by minutes; web-4's is
	// the validity and an hour ahead (a reader booted with its clock a day behind).
	m.must(declareCmd(Selector{Nodes: []string{"web-2"}}, `{"files":[]}`, t0.Add(50*time.Minute)))
	m.must(declareCmd(Selector{Nodes: []string{"web-3"}}, `{"files":[]}`, t0.Add(StampAheadTolerance)))
	m.must(declareCmd(Selector{Nodes: []string{"web-4"}}, `{"files":[]}`, t0.Add(testValidity+time.Hour)))

	for _, tc := range []struct {
		now    time.Time
		due    []string
		ahead  int
		behind []string
	}{
		{t0, []string{"web-2"}, 1, []string{"web-4"}},
		{t0.Add(testValidity/2 - time.Second), []string{"web-2"}, 1, []string{"web-4"}},
		{t0.Add(testValidity/2 + time.Second), []string{"web-1", "web-2"}, 1, []string{"web-4"}},
		{t0.Add(50*time.Minute - StampAheadTolerance), []string{"web-1", "web-3"}, 0, []string{"web-4"}},
		// Within the validity of web-4's stamp: stamped again, it is due as ahead.
		{t0.Add(time.Hour + time.Second), []string{"web-1", "web-3", "web-4"}, 1, nil},
		// A reader an hour behind t0: web-1's stamp is ahead, the others are further
		// ahead than the validity.
		{t0.Add(-time.Hour), []string{"web-1"}, 1, []string{"web-2", "web-3", "web-4"}},
	} {
		r := m.state().DueForRefresh(tc.now)
		if !slices.Equal(r.Nodes, tc.due) || r.Ahead != tc.ahead || !slices.Equal(r.Behind, tc.behind) {
			t.Errorf("at t0%+s: due %v (%d ahead), behind %v; want %v (%d ahead), behind %v", tc.now.Sub(t0), r.Nodes, r.Ahead, r.Behind, tc.due, tc.ahead, tc.behind)
		}
	}
	if r := m.state().DueForRefresh(t0.Add(-time.Hour)); !r.Newest.Equal(t0.Add(testValidity + time.Hour)) {
		t.Errorf("newest stamp of those behind: %s, want web-4's", r.Newest)
	}

	// The clock stepped back: the refresh stamps web-2 by it, and nothing is due after.
	m.must(Command{Op: OpRefresh, At: t0.Add(time.Minute), Refresh: &RefreshCmd{Nodes: []string{"web-2"}}})
	n := m.state().Nodes["web-2"]
	if !n.Declared.IssuedAt.Equal(t0.Add(time.Minute)) || !n.Declared.ExpiresAt.Equal(t0.Add(time.Minute+testValidity)) {
		t.Fatalf("after the refresh web-2 is issued %s, expires %s", n.Declared.IssuedAt, n.Declared.ExpiresAt)
	}
	if r := m.state().DueForRefresh(t0.Add(time.Minute)); len(r.Nodes) != 0 {
		t.Fatalf("due right after the refresh: %v", r.Nodes)
	}
}
