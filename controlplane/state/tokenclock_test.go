package state

import (
	"errors"
	"testing"
	"time"
)

// TestAControlTokenWhoseIdentityALeaderAheadDropped (clock audit, finding 2): one
// command stamped by a leader 20 minutes ahead drops a pending control token's
// sealed identity, for good. By a right clock the token is unexpired, but it admits
// no node: ShownState shows it expired. The rules still count it pending until its
// expiry, as they always have, whichever rules the command carries: minting another
// for the node without --replace is refused, and with it cancels this one.
func TestAControlTokenWhoseIdentityALeaderAheadDropped(t *testing.T) {
	for _, rules := range []int{RulesTokensFollowNodes, RulesPendingByRecord, ApplyRules} {
		m := newMachine(t)
		m.must(initCmd("demo", t0))
		m.must(tokenCmd("ctl", "cp-2", RoleControl, t0, 15*time.Minute))
		m.must(tokenCmd("w", "web-1", RoleWorker, t0, 15*time.Minute))
		m.must(Command{Op: OpProbe, At: t0.Add(22 * time.Minute), Probe: &ProbeCmd{ID: "ahead"}})

		s, right := m.state(), t0.Add(3*time.Minute)
		ctl := s.Tokens["ctl"]
		if !ctl.IdentityLost() || ctl.StateAt(right) != TokenPending {
			t.Fatalf("after the leader ahead: identity lost %v, state by its record %s; want lost and pending", ctl.IdentityLost(), ctl.StateAt(right))
		}
		if got := s.ShownState(ctl, right); got != TokenExpired {
			t.Errorf("shown %s by a right clock, want expired", got)
		}
		if got := s.ShownState(s.Tokens["w"], right); got != TokenPending {
			t.Errorf("a worker token, which holds no identity: shown %s, want pending", got)
		}

		again := tokenCmd("ctl-2", "cp-2", RoleControl, right, 15*time.Minute)
		again.Rules = rules
		var pe *PendingTokenError
		if r := m.apply(again); !errors.As(r.Err, &pe) || pe.Pending[0].ID != "ctl" {
			t.Fatalf("rules %d: minting again without --replace: %v; want refused, the token pending", rules, r.Err)
		}
		again.CreateToken.Replace = true
		if r := m.must(again); len(r.Tokens) != 1 || r.Tokens[0].ID != "ctl" {
			t.Fatalf("rules %d: minting again with --replace cancelled %+v; want the token", rules, r.Tokens)
		}
		if got := m.state().ShownState(m.state().Tokens["ctl"], right); got != TokenCancelled {
			t.Errorf("rules %d: once cancelled it is shown %s", rules, got)
		}
	}
}
