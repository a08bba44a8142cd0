package daemon

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/datadir"
	"mesh/controlplane/replication"
	"mesh/host/dirlock"
)

func TestCaughtUpHoldsOnABusyLog(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	beat := func(c *controlTracker, node string, applied, leader uint64) {
		c.beat(api.ControlHeartbeat{V: api.ProtocolVersion, Node: node, AppliedIndex: applied}, at, leader)
		at = at.Add(HeartbeatInterval)
	}
	c := newControlTracker()
	if c.caughtUp("cp-2", 5) {
		t.Fatal("a node never heard from counts as caught up")
	}
	// A quiet log: within caughtUpEntries of the leader.
	beat(c, "cp-2", 100, 105)
	if !c.caughtUp("cp-2", 105+caughtUpEntries-5) || c.caughtUp("cp-2", 100+caughtUpEntries+1) {
		t.Fatal("on a quiet log, caught up means within caughtUpEntries of the leader")
	}
	// A busy log, hundreds of entries between heartbeats: a node that keeps up is
	// always hundreds behind the leader's index by the time the leader looks.
	busy := newControlTracker()
	beat(busy, "cp-3", 1_000, 1_400)
	if busy.caughtUp("cp-3", 1_800) {
		t.Fatal("one heartbeat far behind counts as caught up")
	}
	beat(busy, "cp-3", 1_450, 1_850) // past where the leader was at the heartbeat before
	if !busy.caughtUp("cp-3", 2_300) {
		t.Fatal("a node that keeps up with a busy log is never caught up")
	}
	// Falling behind: it has not reached where the leader was a heartbeat ago.
	beat(busy, "cp-3", 1_700, 2_400)
	if busy.caughtUp("cp-3", 2_800) {
		t.Fatal("a node falling behind counts as caught up")
	}
	// Restoring a snapshot: its index does not move at all.
	stuck := newControlTracker()
	beat(stuck, "cp-4", 0, 500)
	beat(stuck, "cp-4", 0, 900)
	if stuck.caughtUp("cp-4", 1_300) {
		t.Fatal("a node whose applied index does not move counts as caught up")
	}
}

func TestNotFollowingSaysWhatToDo(t *testing.T) {
	three := []replication.Member{{ID: "cp-1", Address: "10.0.0.1:7301", Voter: true}, {ID: "cp-2", Address: "10.0.0.2:7301", Voter: true},
		{ID: "cp-3", Address: "10.0.0.3:7301", Voter: true}, {ID: "cp-4", Address: "10.0.0.4:7301"}}
	err := notFollowing(context.DeadlineExceeded, "cp-1", "", three, time.Minute, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v does not wrap the deadline", err)
	}
	for _, want := range []string{"no leader within 1m0s", "needs 2 of the 3 voters", "cp-2 (10.0.0.2:7301)", "meshctl control status", "Recovering from lost quorum"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("no leader: %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "cp-4") {
		t.Errorf("a nonvoter counted among the voters: %q", err)
	}
	err = notFollowing(context.DeadlineExceeded, "cp-1", "cp-2", three, time.Minute, nil)
	if !strings.Contains(err.Error(), "cp-1 follows cp-2 but had not applied its log within 1m0s") {
		t.Errorf("with a leader: %q", err)
	}
	// A full disk, with a leader or without: the store is what to mend (it said
	// "a large state to transfer, or a slow disk").
	for _, leader := range []string{"", "cp-2"} {
		err = notFollowing(context.DeadlineExceeded, "cp-1", leader, three, time.Minute, syscall.ENOSPC)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "could not write its Raft store") ||
			!strings.Contains(err.Error(), "no space left on device") || strings.Contains(err.Error(), "slow disk") {
			t.Errorf("leader %q, store not written: %q", leader, err)
		}
	}
	// The data directory's own words for it, which meshctl maps to exit 7 as it
	// does the same fault while serve runs (it was exit 1: the cause was text).
	full := storeFailed("/var/lib/mesh", fmt.Errorf("write /var/lib/mesh/raft/raft.db: %w", syscall.ENOSPC))
	err = notFollowing(context.DeadlineExceeded, "cp-1", "", three, time.Minute, full)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, syscall.ENOSPC) || !errors.Is(err, dirlock.ErrNotWritable) || !errors.Is(err, datadir.ErrDiskFull) ||
		strings.Count(err.Error(), "free space") != 1 {
		t.Errorf("a full disk's error is not in the chain, or its advice not said once: %q", err)
	}
	if err := storeFailed("/var/lib/mesh", syscall.EIO); !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "mend the file system under /var/lib/mesh") {
		t.Errorf("another store error: %q", err)
	}
	if storeFailed("/var/lib/mesh", nil) != nil {
		t.Error("no store error became one")
	}
}

// TestStoppingNodeKeepsItsLastSeen: the last heartbeat of a control node that stops
// shows it offline at once, and its last seen stays when it was heard. Before, a
// rolling restart showed the node just stopped "offline, last seen 1h0m2s ago".
func TestStoppingNodeKeepsItsLastSeen(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	c := newControlTracker()
	c.beat(api.ControlHeartbeat{V: api.ProtocolVersion, Node: "cp-2", AppliedIndex: 10}, at, 10)
	if !c.alive("cp-2", at.Add(time.Second)) {
		t.Fatal("a node heard a second ago is not alive")
	}
	stop := at.Add(HeartbeatInterval)
	c.beat(api.ControlHeartbeat{V: api.ProtocolVersion, Node: "cp-2", AppliedIndex: 11, Stopping: true}, stop, 11)
	if c.alive("cp-2", stop) {
		t.Fatal("a node whose last heartbeat says it stops is still alive")
	}
	if _, seen, ok := c.last("cp-2"); !ok || !seen.Equal(stop) {
		t.Fatalf("last seen %v after a stopping heartbeat at %v", seen, stop)
	}
	back := stop.Add(3 * time.Second)
	c.beat(api.ControlHeartbeat{V: api.ProtocolVersion, Node: "cp-2", AppliedIndex: 12}, back, 12)
	if !c.alive("cp-2", back) {
		t.Fatal("a node that beats again after stopping is not alive")
	}
	if c.alive("cp-2", back.Add(3*HeartbeatInterval+time.Second)) {
		t.Fatal("a node silent for more than three heartbeats is alive")
	}
}

// TestARemovedNodeIsForgotten: what was heard of a removed control node is dropped
// when a machine is admitted under its id, so that one is not shown with the removed
// one's heartbeats (holding the CA key, alive, caught up) before it is heard from
// itself, nor with what was logged of the removed one (a leak review: those entries
// were kept for good).
func TestARemovedNodeIsForgotten(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	c := newControlTracker()
	c.beat(api.ControlHeartbeat{V: api.ProtocolVersion, Node: "cp-1", AppliedIndex: 100, CAKey: true}, at, 100)
	c.beat(api.ControlHeartbeat{V: api.ProtocolVersion, Node: "cp-2", AppliedIndex: 100}, at, 100)
	// What was said of each, and when: said again at once of the new machine.
	c.due("cp-1\x00follow", at, time.Hour)
	c.due("cp-2\x00follow", at, time.Hour)
	c.forget("cp-1")
	if !c.due("cp-1\x00follow", at, time.Hour) || c.due("cp-2\x00follow", at, time.Hour) {
		t.Fatal("forgetting cp-1 kept when it was last told of, or forgot cp-2's")
	}
	if hb, _, ok := c.last("cp-1"); ok || hb.CAKey {
		t.Fatalf("the removed node is still heard of: %+v", hb)
	}
	if c.alive("cp-1", at) || c.caughtUp("cp-1", 100) {
		t.Fatal("the removed node still counts as alive or caught up")
	}
	if _, _, ok := c.last("cp-2"); !ok || !c.alive("cp-2", at) {
		t.Fatal("forgetting one node forgot another")
	}
}

// TestRemovalLeavesAQuorumThatServes: three voters, cp-3 down, cp-2 removed through
// the leader cp-1. The configuration left, {cp-1, cp-3}, needs cp-3 to commit
// anything, so the leader stepped down as it took cp-2 out and no leader could be
// elected (cp-2 shut out for good). cp-3 is now demoted first; with every voter
// serving, or the removed one silent, nothing is; a leader that hears too few
// voters to judge plans nothing and says so.
func TestRemovalLeavesAQuorumThatServes(t *testing.T) {
	voters := func(ids ...string) []replication.Member {
		var out []replication.Member
		for _, id := range ids {
			out = append(out, replication.Member{ID: id, Voter: true})
		}
		return out
	}
	up := func(ids ...string) func(string) bool {
		return func(id string) bool { return slices.Contains(ids, id) }
	}
	for _, c := range []struct {
		name    string
		members []replication.Member
		target  string
		serving func(string) bool
		demote  []string
		blind   bool
	}{
		{"three, one down, another removed", voters("cp-1", "cp-2", "cp-3"), "cp-2", up("cp-1", "cp-2"), []string{"cp-3"}, false},
		{"three, all up", voters("cp-1", "cp-2", "cp-3"), "cp-2", up("cp-1", "cp-2", "cp-3"), nil, false},
		{"three, the one down removed", voters("cp-1", "cp-2", "cp-3"), "cp-3", up("cp-1", "cp-2"), nil, false},
		{"five, two down, another removed", voters("cp-1", "cp-2", "cp-3", "cp-4", "cp-5"), "cp-2", up("cp-1", "cp-2", "cp-3"), []string{"cp-4"}, false},
		{"five, one down, another removed", voters("cp-1", "cp-2", "cp-3", "cp-4", "cp-5"), "cp-2", up("cp-1", "cp-2", "cp-3", "cp-4"), nil, false},
		{"a nonvoter removed, a voter down", append(voters("cp-1", "cp-2", "cp-3"), replication.Member{ID: "cp-4"}), "cp-4", up("cp-1", "cp-2"), nil, false},
		{"the leader heard no one", voters("cp-1", "cp-2", "cp-3"), "cp-2", up("cp-1"), nil, true},
	} {
		p := planRemoval(c.members, c.target, "cp-1", c.serving)
		if !slices.Equal(p.demote, c.demote) || p.blind != c.blind {
			t.Errorf("%s: demote %v blind %v, want %v %v", c.name, p.demote, p.blind, c.demote, c.blind)
		}
	}
}

// TestALostLeadershipIsNotRunAgain: a removal whose change of the Raft configuration
// was appended and then lost with the leadership said "run the same command again to
// finish", which only waited for a leader that could not be elected. It now sends the
// operator to control status; a change raft did not take is still run again.
func TestALostLeadershipIsNotRunAgain(t *testing.T) {
	lost := raftRemoveError("cp-2", "cp-1", fmt.Errorf("%w: %w", replication.ErrLeadershipLost, errors.New("leadership lost while committing log")))
	if strings.Contains(lost.Message, "run the same command again") || !strings.Contains(lost.Message, "meshctl control status") || lost.Code != api.CodeUnavailable {
		t.Errorf("leadership lost: %+v", lost)
	}
	notTaken := raftRemoveError("cp-2", "cp-1", fmt.Errorf("%w: %w", replication.ErrNotLeader, replication.ErrNotAppended))
	if !strings.Contains(notTaken.Message, "run the same command again to finish") {
		t.Errorf("a change raft did not take: %+v", notTaken)
	}
}
