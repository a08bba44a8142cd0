package daemon

import (
	"testing"
	"time"

	"mesh/controlplane/api"
)

// TestClockHandoverDecision: the leader hands leadership over when its clock is the
// one off: at least two other voters report their clock (within three heartbeat
// intervals, not stopping, not an older node without a clock), all of them more than
// the tolerance off the leader's in the same direction, and within it of each other.
// The target is a reporting voter that has caught up; at most one attempt per
// handoverEvery.
func TestClockHandoverDecision(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	const applied = 1_000
	type beat struct {
		node     string
		off      time.Duration // its clock less the leader's
		age      time.Duration // how long before now it arrived
		behind   uint64        // entries behind the leader's applied index
		noClock  bool          // an older node
		stopping bool
	}
	all := []string{"cp-2", "cp-3", "cp-4", "cp-5"}
	cases := []struct {
		name   string
		voters []string
		beats  []beat
		last   time.Duration // how long before now the last attempt was; 0: none
		want   string        // the target; "": no handover
	}{
		{name: "two voters in all: one other cannot tell which clock is wrong", voters: all[:1],
			beats: []beat{{node: "cp-2", off: -2 * time.Hour}}},
		{name: "three voters, both others behind the leader and agreeing", voters: all[:2],
			beats: []beat{{node: "cp-2", off: -2 * time.Hour}, {node: "cp-3", off: -2*time.Hour + time.Minute}}, want: "cp-2"},
		{name: "three voters, both others ahead of the leader and agreeing", voters: all[:2],
			beats: []beat{{node: "cp-2", off: 3 * time.Hour}, {node: "cp-3", off: 3 * time.Hour}}, want: "cp-2"},
		{name: "three voters, clocks within the tolerance", voters: all[:2],
			beats: []beat{{node: "cp-2", off: -4 * time.Minute}, {node: "cp-3", off: 4 * time.Minute}}},
		{name: "three voters, exactly the tolerance off", voters: all[:2],
			beats: []beat{{node: "cp-2", off: -clockTolerance}, {node: "cp-3", off: -clockTolerance}}},
		{name: "three voters, one off and one agreeing with the leader", voters: all[:2],
			beats: []beat{{node: "cp-2", off: -2 * time.Hour}, {node: "cp-3", off: -4 * time.Minute}}},
		{name: "three voters, one ahead and one behind", voters: all[:2],
			beats: []beat{{node: "cp-2", off: -2 * time.Hour}, {node: "cp-3", off: 2 * time.Hour}}},
		{name: "three voters, both behind but disagreeing with each other", voters: all[:2],
			beats: []beat{{node: "cp-2", off: -2 * time.Hour}, {node: "cp-3", off: -2*time.Hour + 10*time.Minute}}},
		{name: "three voters, one heartbeat stale", voters: all[:2],
			beats: []beat{{node: "cp-2", off: -2 * time.Hour}, {node: "cp-3", off: -2 * time.Hour, age: 3*HeartbeatInterval + time.Second}}},
		{name: "three voters, one never heard", voters: all[:2],
			beats: []beat{{node: "cp-2", off: -2 * time.Hour}}},
		{name: "three voters, one stopping", voters: all[:2],
			beats: []beat{{node: "cp-2", off: -2 * time.Hour}, {node: "cp-3", off: -2 * time.Hour, stopping: true}}},
		{name: "three voters, one an older node without a clock", voters: all[:2],
			beats: []beat{{node: "cp-2", off: -2 * time.Hour}, {node: "cp-3", noClock: true}}},
		{name: "three voters and a nonvoter off: the nonvoter does not count", voters: all[:1],
			beats: []beat{{node: "cp-2", off: -2 * time.Hour}, {node: "cp-3", off: -2 * time.Hour}}},
		{name: "four voters, all three others behind and agreeing", voters: all[:3],
			beats: []beat{{node: "cp-2", off: -2 * time.Hour}, {node: "cp-3", off: -2 * time.Hour}, {node: "cp-4", off: -2*time.Hour - 2*time.Minute}}, want: "cp-2"},
		{name: "four voters, two others off and one agreeing with the leader", voters: all[:3],
			beats: []beat{{node: "cp-2", off: -2 * time.Hour}, {node: "cp-3", off: -2 * time.Hour}, {node: "cp-4"}}},
		{name: "four voters, two others off and one stale", voters: all[:3],
			beats: []beat{{node: "cp-2", off: -2 * time.Hour}, {node: "cp-3", off: -2 * time.Hour}, {node: "cp-4", age: time.Minute}}, want: "cp-2"},
		{name: "four voters, one off and two older nodes", voters: all[:3],
			beats: []beat{{node: "cp-2", off: -2 * time.Hour}, {node: "cp-3", noClock: true}, {node: "cp-4", noClock: true}}},
		{name: "four voters, two off and an older node", voters: all[:3],
			beats: []beat{{node: "cp-2", noClock: true}, {node: "cp-3", off: -2 * time.Hour}, {node: "cp-4", off: -2 * time.Hour}}, want: "cp-3"},
		{name: "five voters, all others ahead and agreeing", voters: all,
			beats: []beat{{node: "cp-2", off: time.Hour}, {node: "cp-3", off: time.Hour}, {node: "cp-4", off: time.Hour}, {node: "cp-5", off: time.Hour + 4*time.Minute}}, want: "cp-2"},
		{name: "the first by name has not caught up: the next", voters: all[:2],
			beats: []beat{{node: "cp-2", off: -2 * time.Hour, behind: 500}, {node: "cp-3", off: -2 * time.Hour}}, want: "cp-3"},
		{name: "none has caught up", voters: all[:2],
			beats: []beat{{node: "cp-2", off: -2 * time.Hour, behind: 500}, {node: "cp-3", off: -2 * time.Hour, behind: 500}}},
		{name: "an attempt 4m59s ago", voters: all[:2], last: handoverEvery - time.Second,
			beats: []beat{{node: "cp-2", off: -2 * time.Hour}, {node: "cp-3", off: -2 * time.Hour}}},
		{name: "an attempt 5m ago", voters: all[:2], last: handoverEvery,
			beats: []beat{{node: "cp-2", off: -2 * time.Hour}, {node: "cp-3", off: -2 * time.Hour}}, want: "cp-2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newControlTracker()
			for _, b := range tc.beats {
				at := now.Add(-b.age - time.Second)
				hb := api.ControlHeartbeat{V: api.ProtocolVersion, Node: b.node, Raft: api.RaftVoter, AppliedIndex: applied - b.behind, Stopping: b.stopping}
				if !b.noClock {
					hb.Clock = at.Add(b.off).UTC()
				}
				c.beat(hb, at, applied)
			}
			if tc.last != 0 {
				c.noteHandover(now.Add(-tc.last))
			}
			h, ok := c.clockHandover(tc.voters, applied, now)
			switch {
			case tc.want == "" && ok:
				t.Fatalf("hands over to %s (clocks off by %v), want no handover", h.target, h.off)
			case tc.want != "" && !ok:
				t.Fatalf("no handover (clocks off by %v), want one to %s", h.off, tc.want)
			case ok && h.target != tc.want:
				t.Fatalf("hands over to %s, want %s", h.target, tc.want)
			}
		})
	}
}
