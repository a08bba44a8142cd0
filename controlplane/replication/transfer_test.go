package replication

import (
	"log/slog"
	"testing"
	"time"
)

// TestTransferLeadership: the leader of three voters hands leadership to the one it
// names, which leads at once; a node that does not lead cannot hand it over.
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
	if err := leader.TransferLeadership("cp-3", binds["cp-3"]); err != nil {
		t.Fatalf("transfer to cp-3: %v", err)
	}
	waitFor(t, "cp-3 leads", nodes["cp-3"].IsLeader)
	if leader.IsLeader() || nodes["cp-2"].IsLeader() {
		t.Fatal("another node than cp-3 still leads")
	}
	probe(t, nodes["cp-3"], "after")
}
