package daemon

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

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
	kept, removed := map[string]bool{}, map[string]bool{}
	silentFor := map[string]time.Duration{} // heard that long ago, else a second ago
	judge3 := func(now time.Time) ([]string, []string, []string) {
		return configsApart(configView{self: "cp-1", own: own, now: now, members: []string{"cp-1", "cp-2", "cp-4"}, apart: apart,
			last: func(id string) (api.ControlHeartbeat, time.Time, bool) {
				hb, ok := beats[id]
				if d, silent := silentFor[id]; silent {
					return hb, now.Add(-d), ok
				}
				return hb, now.Add(-time.Second), ok
			},
			caughtUp: func(id string) bool { return !lagging[id] },
			alive:    func(id string) bool { return alive[id] },
			kept:     func(id string) bool { return kept[id] },
			removed:  func(id string) bool { return removed[id] }})
	}
	judge := func(now time.Time) ([]string, []string) {
		stale, newer, _ := judge3(now)
		return stale, newer
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
	// cp-3 stopped a minute ago (a rolling restart), or a day ago (a maintenance),
	// and the state keeps it: it still counts, and appending the leader's would
	// drop it from Raft for good (a review). Never heard by this leader (a node a
	// lost quorum took, before its removal: the leader restarted since), it does not.
	kept["cp-3"] = true
	beats["cp-3"] = api.ControlHeartbeat{Node: "cp-3", Leader: "cp-1", RaftConfig: own}
	silentFor["cp-3"] = time.Minute
	if _, newer := judge(t0.Add(configStaleAfter)); !slices.Equal(newer, []string{"cp-3"}) {
		t.Fatalf("a node the state keeps, stopped a minute ago: newer %v, want cp-3", newer)
	}
	silentFor["cp-3"] = 24 * time.Hour
	if _, newer := judge(t0.Add(configStaleAfter)); !slices.Equal(newer, []string{"cp-3"}) {
		t.Fatalf("a node the state keeps, stopped a day ago: newer %v, want cp-3", newer)
	}
	delete(beats, "cp-3")
	if _, newer := judge(t0.Add(configStaleAfter)); len(newer) != 0 {
		t.Fatalf("a node the state keeps, never heard: newer %v, want none", newer)
	}
	kept["cp-3"] = false
	beats["cp-3"] = api.ControlHeartbeat{Node: "cp-3", Leader: "cp-1", RaftConfig: own}
	silentFor["cp-3"] = time.Minute
	if _, newer := judge(t0.Add(configStaleAfter)); len(newer) != 0 {
		t.Fatalf("a node the state removed, stopped a minute ago: newer %v, want none", newer)
	}
	delete(beats, "cp-3")
	delete(silentFor, "cp-3")
	// The leader's configuration lists a node the state marks removed: the
	// leader's may be the stale one; said only while a member is apart.
	removed["cp-2"] = true
	if _, _, ghosts := judge3(t0.Add(configStaleAfter)); !slices.Equal(ghosts, []string{"cp-2"}) {
		t.Fatalf("the leader's configuration lists a removed node: ghosts %v, want cp-2", ghosts)
	}
	beat("cp-2", own, "cp-1")
	if _, _, ghosts := judge3(t0.Add(configStaleAfter)); len(ghosts) != 0 {
		t.Fatalf("no member apart: ghosts %v, want none", ghosts)
	}
	beat("cp-2", old, "cp-1")
	judge(t0)
	removed["cp-2"] = false
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

// TestAnOversizedHeartbeatIsDropped: a heartbeat of 2 MiB (a Raft configuration of a
// million entries) was parsed by the leader under the lock of operators' changes at
// every round of its autopilot (a review); one over api.MaxControlHeartbeat is
// dropped as too large, one under it heard.
func TestAnOversizedHeartbeatIsDropped(t *testing.T) {
	d := fleet(t, 0)
	beat := func(id string, entries int) {
		t.Helper()
		data, err := json.Marshal(api.ControlHeartbeat{V: api.ProtocolVersion, Node: id, Leader: d.cfg.Node,
			RaftConfig: "1|" + strings.Repeat("cp-x@10.0.0.9:7301:v,", entries) + "cp-y@10.0.0.9:7301:v"})
		if err != nil {
			t.Fatal(err)
		}
		d.handleHeartbeat(&nats.Msg{Subject: api.ControlHeartbeatSubject(id), Data: data})
	}
	beat("cp-8", 10)
	if _, _, heard := d.ctl.last("cp-8"); !heard {
		t.Fatal("a heartbeat of a few entries was not heard")
	}
	beat("cp-9", api.MaxControlHeartbeat/20)
	if _, _, heard := d.ctl.last("cp-9"); heard {
		t.Fatal("a heartbeat over the cap was heard")
	}
	if n := d.guard.snapshot().Dropped[DropKey{Subject: "heartbeat", Reason: ReasonTooLarge}]; n != 1 {
		t.Errorf("%d heartbeats dropped as too large, want 1", n)
	}
}
