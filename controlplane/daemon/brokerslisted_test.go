package daemon

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/datadir"
	"mesh/controlplane/join"
	"mesh/controlplane/replication"
	"mesh/controlplane/state"
	"mesh/integration/freeport"
)

// TestAdmissionRulesFollowTheOldestMember: a control node's admission is stamped with
// state.RulesBrokersWhenServing (listed to hosts once it serves) only when every
// other member of Raft is known to apply the log by them: a member never heard, or
// heard on older rules, lists an admitted node at once, and under the same
// membership version would sign another list than a node on the new rules. A
// worker's enrolment is never stamped: both rules apply it alike.
func TestAdmissionRulesFollowTheOldestMember(t *testing.T) {
	d := fleet(t, 0)
	if got := d.admissionRules(state.RoleControl); got != state.RulesBrokersWhenServing {
		t.Fatalf("alone: a control admission stamped %d, want %d", got, state.RulesBrokersWhenServing)
	}
	if got := d.admissionRules(state.RoleWorker); got != 0 {
		t.Fatalf("a worker's enrolment stamped %d, want 0", got)
	}
	if err := d.raft.AddNonvoter("cp-2", "127.0.0.1:1", time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := d.admissionRules(state.RoleControl); got != 0 {
		t.Fatalf("with cp-2 a member never heard: stamped %d, want 0", got)
	}
	for _, c := range []struct{ announced, want int }{
		{state.RulesRequests, 0},
		{state.ApplyRules, state.RulesBrokersWhenServing},
		{state.RulesSealedTo, 0},
	} {
		d.ctl.beat(api.ControlHeartbeat{V: api.ProtocolVersion, Node: "cp-2", Raft: api.RaftNonvoter, Rules: c.announced}, d.now(), 0)
		if got := d.admissionRules(state.RoleControl); got != c.want {
			t.Fatalf("cp-2 announcing rules %d: a control admission stamped %d, want %d", c.announced, got, c.want)
		}
	}
}

// TestAnAdmittedControlNodeIsListedOnceHeardServing: with cp-2 on older rules, a
// control node admitted as the gate says is listed at once (hosts told, as the older
// rules do). Once cp-2 announces the current rules, a node admitted is not listed:
// no list for hosts, no new version, routes and Raft told only; heard serving while
// out of Raft (its join rolled back), still not; a member of Raft heard serving, the
// leader's autopilot lists it, hosts are told, and the version grows once.
func TestAnAdmittedControlNodeIsListedOnceHeardServing(t *testing.T) {
	d := fleet(t, 0)
	// Far enough past a heartbeat's index that no node heard below is caught up:
	// nothing is promoted (the nonvoters' addresses answer nothing).
	for range 2 * caughtUpEntries {
		if _, err := d.raft.Apply(state.Command{Op: state.OpPurge}, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.raft.AddNonvoter("cp-2", "127.0.0.1:1", time.Minute); err != nil {
		t.Fatal(err)
	}
	beat := func(node string, rules int) {
		d.ctl.beat(api.ControlHeartbeat{V: api.ProtocolVersion, Node: node, Raft: api.RaftNonvoter, Rules: rules}, d.now(), d.raft.AppliedIndex())
	}
	admit := func(node, broker string) {
		t.Helper()
		res, err := d.raft.Apply(state.Command{Op: state.OpCreateToken, CreateToken: &state.CreateTokenCmd{ID: "tok-" + node, Node: node, Role: state.RoleControl,
			TTL: time.Hour, Control: &state.ControlAddrs{Broker: broker, Raft: "127.0.0.1:1", Cluster: "127.0.0.1:1"}, Sealed: []byte("sealed")}}, time.Minute)
		if err != nil || res.Err != nil {
			t.Fatalf("mint for %s: %v %v", node, err, res.Err)
		}
		d.effects.take()
		res, err = d.raft.Apply(state.Command{Op: state.OpEnrol, Rules: d.admissionRules(state.RoleControl),
			Enrol: &state.EnrolCmd{TokenID: "tok-" + node, Node: node, Role: state.RoleControl, PublicKey: "U" + node, CurveKey: "X" + node}}, time.Minute)
		if err != nil || res.Err != nil {
			t.Fatalf("admit %s: %v %v", node, err, res.Err)
		}
	}
	membership := func() (v uint64, brokers []string) {
		d.fsm.Read(func(s *state.State) { v, brokers = s.Membership() })
		return v, brokers
	}
	told := func() (hosts, peers bool) {
		for _, e := range d.effects.take() {
			hosts = hosts || e.kind == effectMembership
			peers = peers || e.kind == effectPeers || e.kind == effectMembership
		}
		return hosts, peers
	}
	v0, first := membership()

	// cp-2 on the rules before: admitted, listed at once, hosts told.
	beat("cp-2", state.RulesRequests)
	admit("cp-3", "127.0.0.3:7300")
	v, brokers := membership()
	if want := append(slices.Clone(first), "127.0.0.3:7300"); !slices.Equal(brokers, want) || v != v0+1 {
		t.Fatalf("cp-3 admitted while cp-2 is on older rules: version %d, brokers %v; want %d, %v (listed at once, as cp-2 lists it)", v, brokers, v0+1, want)
	}
	if hosts, _ := told(); !hosts {
		t.Fatal("hosts were not told the list cp-3 was admitted into")
	}
	listed := brokers

	// cp-2 upgraded: cp-4 admitted, not listed.
	beat("cp-2", state.ApplyRules)
	admit("cp-4", "127.0.0.4:7300")
	if v, brokers := membership(); !slices.Equal(brokers, listed) || v != v0+1 {
		t.Fatalf("cp-4 admitted: version %d, brokers %v; want %d, %v (not listed before it serves)", v, brokers, v0+1, listed)
	}
	if hosts, peers := told(); hosts || !peers {
		t.Fatalf("cp-4 admitted: hosts told %v, routes and Raft told %v; want routes and Raft only", hosts, peers)
	}
	// Not heard: nothing. Heard, but out of Raft (its join rolled back): nothing.
	d.promoteServing(d.now())
	beat("cp-4", state.ApplyRules)
	d.promoteServing(d.now())
	if v, brokers := membership(); !slices.Equal(brokers, listed) || v != v0+1 {
		t.Fatalf("cp-4 out of Raft: version %d, brokers %v; want %d, %v", v, brokers, v0+1, listed)
	}
	// A member of Raft, heard serving: listed.
	if err := d.raft.AddNonvoter("cp-4", "127.0.0.1:2", time.Minute); err != nil {
		t.Fatal(err)
	}
	d.promoteServing(d.now())
	v, brokers = membership()
	if want := append(slices.Clone(listed), "127.0.0.4:7300"); !slices.Equal(brokers, want) || v != v0+2 {
		t.Fatalf("cp-4 a member heard serving: version %d, brokers %v; want %d, %v", v, brokers, v0+2, want)
	}
	if hosts, _ := told(); !hosts {
		t.Fatal("hosts were not told the list cp-4 was listed in")
	}
	before := lastIndex(d)
	beat("cp-4", state.ApplyRules)
	d.promoteServing(d.now())
	if n := lastIndex(d) - before; n != 0 {
		t.Fatalf("%d entries committed for a node listed already", n)
	}
}

// TestAJoinIsListedOnceTheNodeServes: the whole path in one process, meshctl join's
// own code against a serving control node: the admission is stamped by the enrolment
// handler, so a node that joined and does not serve is not in the list; once its
// serve runs, the leader hears it and lists it, and this node's mesh.json follows.
func TestAJoinIsListedOnceTheNodeServes(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	dir1 := bootstrapped(t, "listed")
	d1 := serveNode(t, dir1, log, time.Now)
	waitFor(t, 30*time.Second, "cp-1 leads", d1.raft.IsLeader)
	brokers := func() (out []string) {
		d1.fsm.Read(func(s *state.State) { out = s.Brokers() })
		return out
	}
	first := brokers()

	addrs := freeport.Addrs(t, 3)
	tok, _, err := join.Mint(dir1, join.MintOptions{Node: "cp-2", Broker: addrs[0], Raft: addrs[1], Cluster: addrs[2], TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	dir2 := datadir.Dir(filepath.Join(t.TempDir(), "cp-2"))
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := join.Join(ctx, join.Options{Dir: dir2, Token: tok.Encode(), Out: &out, Logger: log,
		Timeouts: replication.Timeouts{Heartbeat: 300 * time.Millisecond, Election: 300 * time.Millisecond, LeaderLease: 150 * time.Millisecond, Commit: 50 * time.Millisecond}}); err != nil {
		t.Fatalf("join cp-2: %v\n%s", err, out.String())
	}
	// Joined, not serving: two heartbeat intervals of the autopilot list nothing.
	time.Sleep(2 * HeartbeatInterval)
	if got := brokers(); !slices.Equal(got, first) {
		t.Fatalf("cp-2 joined and not serving: brokers %v, want %v", got, first)
	}
	if cfg, err := dir1.LoadConfig(); err != nil || slices.Contains(cfg.Brokers, addrs[0]) {
		t.Fatalf("cp-1's mesh.json lists %v (%v) before cp-2 serves", cfg.Brokers, err)
	}

	serveNode(t, dir2, log, time.Now)
	want := append(slices.Clone(first), addrs[0])
	waitFor(t, 20*time.Second, "cp-2 listed once it serves", func() bool { return slices.Equal(brokers(), want) })
	waitFor(t, 10*time.Second, "cp-1's mesh.json lists cp-2", func() bool {
		cfg, err := dir1.LoadConfig()
		return err == nil && slices.Equal(cfg.Brokers, want)
	})
}
