package daemon

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
)

// TestRefreshByAClockBehindTheValidity (clock audit, finding 3): a control node
// whose clock is more than the validity behind the stamps in its state stamped every
// declaration again into the past, where each expired before any host read it, and
// its log blamed "a clock ahead". Now: nothing is stamped again, and an ERROR says
// this node's clock is at least that far behind, at most every resendLogEvery. One
// behind by less than the validity still stamps them again, and the WARN names both
// clocks.
func TestRefreshByAClockBehindTheValidity(t *testing.T) {
	d, log, before, validity := refreshFixture(t)

	behind := before.IssuedAt.Add(-validity - 2*time.Hour)
	// Its own heartbeat, which reaches it as the others' do, vouches for nothing.
	d.ctl.beat(api.ControlHeartbeat{V: api.ProtocolVersion, Node: d.cfg.Node, Raft: api.RaftLeader, Rules: state.ApplyRules, Clock: behind}, behind, 0)
	d.refresh(behind)
	d.refresh(behind.Add(d.opts.ReconcileInterval))
	var after state.Declared
	d.fsm.Read(func(s *state.State) { after = s.Nodes["web-1"].Declared })
	if after != before {
		t.Fatalf("a clock %s behind the stamp stamped it again: %+v, was %+v", validity+2*time.Hour, after, before)
	}
	var lines []string
	for _, l := range strings.Split(log.String(), "\n") {
		if strings.Contains(l, "level=ERROR") && strings.Contains(l, "clock is behind the declarations' stamps") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "behind_at_least="+(validity+2*time.Hour).String()) || !strings.Contains(lines[0], "first=web-1") {
		t.Fatalf("want one ERROR naming web-1 and how far behind this clock is at least; got:\n%s", log.String())
	}

	d.refresh(before.IssuedAt.Add(-2 * time.Hour))
	d.fsm.Read(func(s *state.State) { after = s.Nodes["web-1"].Declared })
	if !after.IssuedAt.Equal(before.IssuedAt.Add(-2 * time.Hour)) {
		t.Fatalf("a clock 2h behind the stamp, within the validity, did not stamp it again: %+v", after)
	}
	if !strings.Contains(log.String(), "or this node's clock is behind now") {
		t.Fatalf("the WARN does not name this clock behind:\n%s", log.String())
	}
}

// TestRefreshOfStampsFromAClockFarAhead: stamps more than the validity ahead of this
// node's clock are left alone while nothing says which clock is off; when another
// control node's clock agrees with this one's, a clock that far ahead stamped them
// (a leader booted a day ahead, stepped back since), and they are stamped again by
// this clock, as before the rule above, with a WARN naming the node that agrees.
func TestRefreshOfStampsFromAClockFarAhead(t *testing.T) {
	d, log, before, validity := refreshFixture(t)
	now := before.IssuedAt.Add(-validity - 2*time.Hour)
	// cp-3's clock a day off this one's: no agreement.
	d.ctl.beat(api.ControlHeartbeat{V: api.ProtocolVersion, Node: "cp-3", Raft: api.RaftVoter, Rules: state.ApplyRules, Clock: now.Add(25 * time.Hour)}, now, 0)
	d.refresh(now)
	var after state.Declared
	d.fsm.Read(func(s *state.State) { after = s.Nodes["web-1"].Declared })
	if after != before {
		t.Fatalf("stamped again with no clock agreeing with this one: %+v, was %+v", after, before)
	}
	// cp-2's clock agrees with this one's, within the tolerance.
	d.ctl.beat(api.ControlHeartbeat{V: api.ProtocolVersion, Node: "cp-2", Raft: api.RaftVoter, Rules: state.ApplyRules, Clock: now.Add(time.Minute)}, now, 0)
	d.refresh(now)
	d.fsm.Read(func(s *state.State) { after = s.Nodes["web-1"].Declared })
	if !after.IssuedAt.Equal(now) {
		t.Fatalf("with cp-2's clock agreeing, not stamped again by this clock: %+v, want issued %s", after, now)
	}
	if !strings.Contains(log.String(), "agreeing=cp-2") {
		t.Fatalf("the WARN does not name cp-2:\n%s", log.String())
	}
}

// refreshFixture is a control node whose log the test reads, with web-1 enrolled:
// web-1's declaration as stamped, and the state's validity.
func refreshFixture(t *testing.T) (*Daemon, *lockedBuffer, state.Declared, time.Duration) {
	t.Helper()
	log := &lockedBuffer{}
	d, err := Open(context.Background(), Options{Dir: bootstrapped(t, "refresh"), Logger: slog.New(slog.NewTextHandler(log, nil)),
		Timeouts: testTimeouts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	enrolledKey(t, d, "web-1")
	var (
		before   state.Declared
		validity time.Duration
	)
	d.fsm.Read(func(s *state.State) { before, validity = s.Nodes["web-1"].Declared, s.Validity })
	return d, log, before, validity
}
