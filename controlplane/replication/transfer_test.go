package replication

import (
	"log/slog"
	"testing"
	"time"
)

// TestTransferLeadership: the leader of three voters hands leadership to the one it
// names, which leads at once; a node that does not lead cannot hand it over. Each
// member counts the leaders it learnt of (mesh_raft_leader_changes_total): the
// first, then the one the transfer made, on the member that led as on the others.
func TestTransferLeadership(t *testing.T) {
	ca := newCA(t, "mesh")
	discard := slog.New(slog.DiscardHandler)
	quick := Timeouts{Heartbeat: 300 * time.Millisecond, Commit: 5 * time.Millisecond}
	leader := startLeader(t, Config{Dir: t.TempDir(), ID: "cp-1", Bind: freeAddr(t), TLS: leafConfig(t, ca), FSM: &countFSM{}, Logger: discard, Timeouts: quick})
	defer leader.Close()
	nodes := map[string]*Node{}
	binds := map[string]string{}
	for _, id := range []string{"cp-2", "cp-3"} {
		cfg := Config{Dir: t.TempDir(), ID: id, Bind: freeAddr(t), TLS: leafConfig(t, ca), FSM: &countFSM{}, Logger: discard, Timeouts: quick}
		nodes[id], binds[id] = startFollower(t, leader, cfg), cfg.Bind
		if err := leader.Promote(id, cfg.Bind, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if err := nodes["cp-2"].TransferLeadership("cp-3", binds["cp-3"]); err == nil {
		t.Fatal("a follower handed leadership over")
	}
	all := map[string]*Node{"cp-1": leader, "cp-2": nodes["cp-2"], "cp-3": nodes["cp-3"]}
	for id, n := range all {
		waitFor(t, id+" knows the leader", func() bool { return n.raft.Leader() != "" })
		if got := n.Status().LeaderChanges; got != 1 {
			t.Errorf("%s learnt of %d leaders before the transfer, want 1", id, got)
		}
	}
	term := leader.raft.CurrentTerm()
	if err := leader.TransferLeadership("cp-3", binds["cp-3"]); err != nil {
		t.Fatalf("transfer to cp-3: %v", err)
	}
	waitFor(t, "cp-3 leads", nodes["cp-3"].IsLeader)
	if leader.IsLeader() || nodes["cp-2"].IsLeader() {
		t.Fatal("another node than cp-3 still leads")
	}
	for id, n := range all {
		waitFor(t, id+" knows cp-3 leads", func() bool { _, lid := n.raft.LeaderWithID(); return lid == "cp-3" })
		// Raft records the leader before its observers hear of it: the count
		// may follow a moment later (it read 1 once, under load).
		waitFor(t, id+" counts cp-3's leadership", func() bool { return n.Status().LeaderChanges >= 2 })
		// The transfer is one election (term+1). On a loaded machine a follower
		// may miss heartbeats and call more; each can make it learn of one more
		// leader, and each raises the term: only those are allowed for. The old
		// leader's heartbeat landing while a follower took the new term is not
		// one (it counted cp-1 twice in one term before leaders were counted
		// once per term).
		extra := n.raft.CurrentTerm() - term - 1
		if got := n.Status().LeaderChanges; got < 2 || got > 2+extra {
			t.Errorf("%s learnt of %d leaders after the transfer and %d election(s) besides it, want 2 and one for each", id, got, extra)
		}
	}
	probe(t, nodes["cp-3"], "after")
}
