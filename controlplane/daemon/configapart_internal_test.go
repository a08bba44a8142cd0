package daemon

import (
	"slices"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/api"
)

// TestConfigsApart: the leader judges a member to hold a stale Raft configuration
// only once it has held another for configStaleAfter while it follows this leader,
// caught up, in this version's words; and names the serving control nodes that
// member's configuration lists and the leader's leaves out, the sign that the
// stale one may be the leader's (a review: appending it then would drop them).
func TestConfigsApart(t *testing.T) {
	const own = "1|cp-1@10.0.0.1:7301:v,cp-2@10.0.0.2:7301:n"
	t0 := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	beats := map[string]api.ControlHeartbeat{}
	alive := map[string]bool{}
	lagging := map[string]bool{}
	apart := map[string]time.Time{}
	at := t0
	judge := func(now time.Time) ([]string, []string) {
		at = now.Add(-time.Second) // heard a second ago
		return configsApart(configView{self: "cp-1", own: own, now: now, members: []string{"cp-1", "cp-2", "cp-4"}, apart: apart,
			last: func(id string) (api.ControlHeartbeat, time.Time, bool) {
				hb, ok := beats[id]
				return hb, at, ok
			},
			caughtUp: func(id string) bool { return !lagging[id] },
			alive:    func(id string) bool { return alive[id] }})
	}
	beat := func(id, config, leader string) {
		beats[id] = api.ControlHeartbeat{Node: id, Leader: leader, RaftConfig: config}
	}
	// The same configuration: nothing.
	beat("cp-2", own, "cp-1")
	if stale, _ := judge(t0); len(stale) != 0 {
		t.Fatalf("the same configuration judged apart: %v", stale)
	}
	// Another, first seen: not yet; configStaleAfter later: stale.
	old := "1|cp-1@10.0.0.1:7301:v,cp-2@10.0.0.2:7301:v,cp-3@10.0.0.3:7301:v"
	beat("cp-2", old, "cp-1")
	if stale, _ := judge(t0); len(stale) != 0 {
		t.Fatalf("judged stale when first seen apart: %v", stale)
	}
	stale, newer := judge(t0.Add(configStaleAfter))
	if len(stale) != 1 || !strings.HasPrefix(stale[0], "cp-2 (") || len(newer) != 0 {
		t.Fatalf("after %s apart: stale %v, newer %v; want cp-2 stale, cp-3 (not serving) not newer", configStaleAfter, stale, newer)
	}
	// cp-3, which the leader's configuration leaves out, serves: the leader's may be
	// the stale one.
	alive["cp-3"] = true
	if _, newer := judge(t0.Add(configStaleAfter)); !slices.Equal(newer, []string{"cp-3"}) {
		t.Fatalf("a serving node the leader's configuration leaves out: newer %v, want cp-3", newer)
	}
	alive["cp-3"] = false
	// Not judged, and forgotten: following another leader, behind the log, or in
	// another version's words.
	for name, edit := range map[string]func(){
		"following another leader": func() { beat("cp-2", old, "cp-9") },
		"behind the log":           func() { beat("cp-2", old, "cp-1"); lagging["cp-2"] = true },
		"another format":           func() { beat("cp-2", "2|"+old[2:], "cp-1") },
		"an older version":         func() { beat("cp-2", "", "cp-1") },
	} {
		clear(lagging)
		edit()
		if stale, _ := judge(t0.Add(2 * configStaleAfter)); len(stale) != 0 {
			t.Errorf("%s: judged stale %v", name, stale)
		}
		if _, kept := apart["cp-2"]; kept {
			t.Errorf("%s: still remembered apart", name)
		}
		// Apart again from now on: it counts from now.
		clear(lagging)
		beat("cp-2", old, "cp-1")
		judge(t0.Add(2 * configStaleAfter))
	}
}
