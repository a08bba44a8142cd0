package daemon

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/controlplane/api"
	"mesh/controlplane/replication"
	"mesh/controlplane/state"
)

// TestNotFollowingTakesSixHeartbeatsInARow (audit of the control plane's ordinary
// weeks, finding 2): a voter whose Raft port was blocked showed "voter alive" in
// `meshctl nodes`, its heartbeats going through the brokers, and the documented
// rolling-restart gate passed. The heartbeats the leader hears say which leader a
// node follows and how far it applied: notFollowingBeats of them in a row that show
// it following no leader or another, or trailing, mark it; fewer do not (a restart,
// an election), nor does what a heartbeat of an older version cannot say.
func TestNotFollowingTakesSixHeartbeatsInARow(t *testing.T) {
	type beat struct {
		h       api.ControlHeartbeat
		applied uint64 // the hearing node's applied index
		leader  string // the leader the hearing node follows or is
	}
	hb := func(raftState, leader string, applied uint64) api.ControlHeartbeat {
		return api.ControlHeartbeat{V: api.ProtocolVersion, Node: "cp-3", Raft: api.RaftVoter, AppliedIndex: applied,
			RaftState: raftState, Leader: leader, Term: 7}
	}
	repeat := func(n int, b beat) []beat {
		out := make([]beat, n)
		for i := range out {
			out[i] = b
		}
		return out
	}
	following := beat{hb(api.RaftStateFollower, "cp-1", 50), 50, "cp-1"}
	candidate := beat{hb(api.RaftStateCandidate, "", 50), 50, "cp-1"}
	// stuck applied nothing past 100 while the hearing node went on by 100 a beat.
	stuck := func(h api.ControlHeartbeat, n int) []beat {
		var out []beat
		for i := range n {
			h.AppliedIndex = 100
			out = append(out, beat{h, 200 + uint64(i)*100, "cp-1"})
		}
		return out
	}
	older := api.ControlHeartbeat{V: api.ProtocolVersion, Node: "cp-3", Raft: api.RaftVoter}
	stopping := candidate
	stopping.h.Stopping = true

	for name, tc := range map[string]struct {
		beats []beat
		// from is the heartbeat, counted from 1, from which on the node is shown
		// not following (0: never), until the last (0: to the end); want is in
		// why then.
		from, until int
		want        string
	}{
		"a candidate, five heartbeats": {beats: repeat(5, candidate)},
		"a candidate":                  {beats: repeat(8, candidate), from: 6, want: "a candidate at term 7: it hears no leader"},
		"following no leader": {beats: repeat(6, beat{hb(api.RaftStateFollower, "", 50), 50, "cp-1"}), from: 6,
			want: "it follows no leader at term 7"},
		"following another leader": {beats: repeat(6, beat{hb(api.RaftStateFollower, "cp-9", 50), 50, "cp-1"}), from: 6,
			want: "it follows cp-9 at term 7, not cp-1"},
		"saying it leads": {beats: repeat(6, beat{hb(api.RaftStateLeader, "cp-3", 50), 50, "cp-1"}), from: 6,
			want: "it says it leads at term 7, and cp-1 does"},
		"its Raft shut down":            {beats: repeat(6, beat{hb(api.RaftStateShutdown, "", 50), 50, "cp-1"}), from: 6, want: "its Raft is shutdown"},
		"a following heartbeat between": {beats: append(append(repeat(5, candidate), following), repeat(5, candidate)...)},
		"following once more":           {beats: append(repeat(6, candidate), following), from: 6, until: 6, want: "a candidate"},
		"the last heartbeat of a stop":  {beats: append(append(repeat(5, candidate), stopping), repeat(5, candidate)...)},
		// Restarted: it follows no leader until the leader reaches it again.
		"a restart": {beats: append(repeat(5, beat{hb(api.RaftStateFollower, "", 40), 50, "cp-1"}), repeat(3, following)...)},
		// An election: the hearing node knows no leader meanwhile, then the node
		// names the old one for a moment.
		"an election": {beats: append(append(append(repeat(2, following), repeat(4, beat{hb(api.RaftStateCandidate, "", 50), 50, ""})...),
			repeat(2, beat{hb(api.RaftStateFollower, "cp-1", 50), 50, "cp-2"})...), repeat(4, beat{hb(api.RaftStateFollower, "cp-2", 50), 50, "cp-2"})...)},
		"no leader known where it is heard":  {beats: repeat(8, beat{hb(api.RaftStateCandidate, "", 50), 50, ""})},
		"the leader's own heartbeat":         {beats: repeat(8, beat{api.ControlHeartbeat{V: api.ProtocolVersion, Node: "cp-3", RaftState: api.RaftStateLeader, Leader: "cp-3", Term: 7}, 0, "cp-3"})},
		"an older version, in step":          {beats: repeat(8, beat{older, 0, "cp-1"})},
		"an older version, applying nothing": {beats: stuck(older, 6), from: 6, want: "its applied index 100 trails 700 by more than 10 entries"},
		"following, applying nothing":        {beats: stuck(hb(api.RaftStateFollower, "cp-1", 0), 6), from: 6, want: "its applied index 100 trails 700"},
		"applying nothing, five heartbeats":  {beats: stuck(hb(api.RaftStateFollower, "cp-1", 0), 5)},
		// A busy log: hundreds of entries between two heartbeats, each one past
		// where the hearing node was at the heartbeat before (caughtUp).
		"keeping up with a busy log": {beats: func() []beat {
			var out []beat
			for i := range uint64(8) {
				out = append(out, beat{hb(api.RaftStateFollower, "cp-1", 1_000+i*400), 1_400 + i*400, "cp-1"})
			}
			return out
		}()},
	} {
		t.Run(name, func(t *testing.T) {
			c := newControlTracker()
			at := time.Unix(1_800_000_000, 0)
			var runFrom time.Time
			for i, b := range tc.beats {
				c.heard(b.h, at, b.applied, b.leader)
				why, since := c.stray("cp-3")
				if n := i + 1; tc.from == 0 || n < tc.from || tc.until > 0 && n > tc.until {
					if why != "" {
						t.Fatalf("after heartbeat %d: shown not following (%q)", n, why)
					}
				} else {
					if n == tc.from {
						runFrom = at.Add(-time.Duration(notFollowingBeats-1) * HeartbeatInterval)
					}
					if !strings.Contains(why, tc.want) || !since.Equal(runFrom) {
						t.Fatalf("after heartbeat %d: %q since %v; want %q since %v", n, why, since, tc.want, runFrom)
					}
				}
				at = at.Add(HeartbeatInterval)
			}
		})
	}
}

// TestAControlNodeNotFollowingIsShownAndLogged: through the heartbeats the leader
// hears, a member whose heartbeats say it follows no leader is shown alive and not
// following (`meshctl nodes`, `meshctl control status`'s views) once six in a row
// said so, with why and since when, and the leader logs it; one heartbeat saying it
// follows the leader clears it. A heartbeat of an older version, in step, is never.
// The leader's own heartbeat says what the judgement needs.
func TestAControlNodeNotFollowingIsShownAndLogged(t *testing.T) {
	var log lockedBuffer
	d := loggedDaemon(t, &log, nil)
	leader := d.raft.Leader()
	if leader != d.cfg.Node {
		t.Fatalf("the leader is %q, want %s", leader, d.cfg.Node)
	}
	res, err := d.raft.Apply(state.Command{Op: state.OpCreateToken, CreateToken: &state.CreateTokenCmd{ID: "tok-cp-2", Node: "cp-2", Role: state.RoleControl,
		TTL: time.Hour, Control: &state.ControlAddrs{Broker: "127.0.0.2:7300", Raft: "127.0.0.1:1", Cluster: "127.0.0.1:1"}, Sealed: []byte("sealed")}}, time.Minute)
	if err != nil || res.Err != nil {
		t.Fatalf("mint: %v %v", err, res.Err)
	}
	res, err = d.raft.Apply(state.Command{Op: state.OpEnrol, Enrol: &state.EnrolCmd{TokenID: "tok-cp-2", Node: "cp-2", Role: state.RoleControl, PublicKey: "Ucp-2", CurveKey: "Xcp-2"}}, time.Minute)
	if err != nil || res.Err != nil {
		t.Fatalf("admit: %v %v", err, res.Err)
	}
	if err := d.raft.AddNonvoter("cp-2", "127.0.0.1:1", time.Minute); err != nil {
		t.Fatal(err)
	}
	send := func(h api.ControlHeartbeat) {
		h.V, h.Node, h.Raft, h.Rules, h.AppliedIndex = api.ProtocolVersion, "cp-2", api.RaftNonvoter, state.ApplyRules, d.raft.AppliedIndex()
		data, _ := json.Marshal(h)
		d.handleHeartbeat(&nats.Msg{Subject: api.ControlHeartbeatSubject("cp-2"), Data: data})
	}
	view := func() api.ControlView {
		t.Helper()
		for _, v := range d.controlStatus().Control {
			if v.ID == "cp-2" {
				return v
			}
		}
		t.Fatal("cp-2 is not among the control nodes")
		return api.ControlView{}
	}
	const logged = "a nonvoting control node answers on the brokers but does not follow the leader"

	cut := api.ControlHeartbeat{RaftState: api.RaftStateFollower, Term: 3}
	before := time.Now()
	for range notFollowingBeats - 1 {
		send(cut)
	}
	d.promoteServing(d.now())
	if v := view(); v.State != api.StateAlive || v.NotFollowing != "" {
		t.Fatalf("after %d heartbeats following no leader: %s, not following %q; want alive and nothing said yet", notFollowingBeats-1, v.State, v.NotFollowing)
	}
	if strings.Contains(log.String(), logged) {
		t.Fatalf("logged before %d heartbeats:\n%s", notFollowingBeats, log.String())
	}
	send(cut)
	v := view()
	if v.State != api.StateAlive || v.NotFollowing != "it follows no leader at term 3" || v.NotFollowingSince.Before(before.Add(-time.Second).UTC()) || v.NotFollowingSince.After(time.Now()) {
		t.Fatalf("after %d heartbeats following no leader: %s, not following %q since %v", notFollowingBeats, v.State, v.NotFollowing, v.NotFollowingSince)
	}
	d.promoteServing(d.now())
	if !strings.Contains(log.String(), logged) || !strings.Contains(log.String(), `why="it follows no leader at term 3"`) {
		t.Fatalf("not logged:\n%s", log.String())
	}
	// The roster's control nodes are these views: `meshctl nodes --json`.
	data, _ := json.Marshal(v)
	if !strings.Contains(string(data), `"not_following":"it follows no leader at term 3"`) || !strings.Contains(string(data), `"not_following_since":`) {
		t.Fatalf("JSON: %s", data)
	}

	send(api.ControlHeartbeat{RaftState: api.RaftStateFollower, Leader: leader, Term: 3})
	if v := view(); v.NotFollowing != "" || !v.NotFollowingSince.IsZero() {
		t.Fatalf("following again: not following %q since %v", v.NotFollowing, v.NotFollowingSince)
	}
	for range 2 * notFollowingBeats {
		send(api.ControlHeartbeat{}) // an older version: no Raft state, in step
	}
	if v := view(); v.State != api.StateAlive || v.NotFollowing != "" {
		t.Fatalf("an older version in step: %s, not following %q", v.State, v.NotFollowing)
	}

	// What this node sends: its Raft state, the leader it follows (itself) and its term.
	own := ownHeartbeat(t, d)
	if own.RaftState != api.RaftStateLeader || own.Leader != d.cfg.Node || own.Term == 0 {
		t.Fatalf("this node's heartbeat says Raft state %q, leader %q, term %d; want leader, %s, its term", own.RaftState, own.Leader, own.Term, d.cfg.Node)
	}
}

// TestAVoterNotFollowingDoesNotServeForAChangeOfVoters (the same audit, its
// remainder): removal planning and promotion took "alive" for serving, so a voter
// whose heartbeats showed it astray still counted towards the quorum a removal
// must leave: three voters, cp-3 alive but cut off from Raft, and cp-2 removed
// left {cp-1, cp-3}, which commits nothing. It serves again once it follows.
func TestAVoterNotFollowingDoesNotServeForAChangeOfVoters(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	c := newControlTracker()
	astray := api.ControlHeartbeat{V: api.ProtocolVersion, Node: "cp-3", Raft: api.RaftVoter, AppliedIndex: 50,
		RaftState: api.RaftStateCandidate, Term: 8}
	for i := range notFollowingBeats {
		now := at.Add(time.Duration(i) * HeartbeatInterval)
		if !c.serving("cp-3", now) && i > 0 {
			t.Fatalf("heartbeat %d: not serving before it was shown astray", i)
		}
		c.heard(astray, now, 50, "cp-1")
	}
	now := at.Add(notFollowingBeats * HeartbeatInterval)
	if !c.alive("cp-3", now) {
		t.Fatal("the node stopped being alive: the test no longer shows what it means to")
	}
	if c.serving("cp-3", now) {
		t.Fatal("a voter shown not following counts as serving")
	}
	members := []replication.Member{{ID: "cp-1", Voter: true}, {ID: "cp-2", Voter: true}, {ID: "cp-3", Voter: true}}
	serving := func(id string) bool { return id == "cp-1" || id == "cp-2" || c.serving(id, now) }
	if p := planRemoval(members, "cp-2", "cp-1", serving); !slices.Equal(p.demote, []string{"cp-3"}) {
		t.Fatalf("removing cp-2 with cp-3 astray: demote %v, want [cp-3]", p.demote)
	}
	following := astray
	following.RaftState, following.Leader = api.RaftStateFollower, "cp-1"
	c.heard(following, now, 50, "cp-1")
	if !c.serving("cp-3", now) {
		t.Fatal("a voter following again does not serve")
	}
}

// ownHeartbeat runs d's heartbeat loop until it sent one heartbeat, and returns it
// as the other control nodes receive it.
func ownHeartbeat(t *testing.T, d *Daemon) api.ControlHeartbeat {
	t.Helper()
	sub, err := d.conns.control.SubscribeSync(api.ControlHeartbeatSubject(d.cfg.Node))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.heartbeatLoop(ctx); close(done) }()
	m, err := sub.NextMsg(5 * time.Second)
	cancel()
	<-done
	if err != nil {
		t.Fatal(err)
	}
	var own api.ControlHeartbeat
	if err := json.Unmarshal(m.Data, &own); err != nil {
		t.Fatal(err)
	}
	return own
}

// TestTheAutopilotRunsOneAtATimeWithOperatorsChanges: the autopilot read the members,
// then promoted by what it read; a `control remove` committed in between had the
// removed node added back as a voter (a review). It takes its turn with the
// operators' changes (adminMu): while one runs it waits, and runs once it ended,
// rather than skipping the round (skipped, a stream of token mints promoted nobody:
// TestPromotionWhileTheLogIsBusy).
func TestTheAutopilotRunsOneAtATimeWithOperatorsChanges(t *testing.T) {
	var log lockedBuffer
	d := loggedDaemon(t, &log, nil)
	if err := d.raft.AddNonvoter("cp-2", "127.0.0.1:1", time.Minute); err != nil {
		t.Fatal(err)
	}
	const said = "a joined control node is not serving yet" // promoteServing's word on cp-2
	d.adminMu.Lock()
	done := make(chan struct{})
	go func() { d.autopilot(t.Context()); close(done) }()
	select {
	case <-done:
		d.adminMu.Unlock()
		t.Fatal("the autopilot ran beside an operator's change")
	case <-time.After(300 * time.Millisecond):
	}
	if strings.Contains(log.String(), said) {
		d.adminMu.Unlock()
		t.Fatalf("the autopilot ran beside an operator's change:\n%s", log.String())
	}
	d.adminMu.Unlock()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the autopilot did not run once the change ended")
	}
	if !strings.Contains(log.String(), said) {
		t.Fatalf("the autopilot's round said nothing of cp-2:\n%s", log.String())
	}
}
