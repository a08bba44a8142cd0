package daemon

import (
	"errors"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
)

// TestControlRemoveOfANodeNeverAdmittedCancelsItsToken (audit of commands run twice,
// interrupted and concurrent, finding 5): `meshctl control remove cp-p` for a node
// whose control token was minted but had not admitted it yet (a join being retried,
// or not started) said "no control node cp-p was ever admitted" (not_found, exit 4)
// and left the token able to admit a control node, which receives the signing key,
// for up to an hour; the operator, who had run what operations.md says to give up on
// a join, believed it stopped. Now the node's pending control tokens are cancelled,
// in one command, and named in the answer; the admission that follows is refused
// (token_cancelled). Run again, with nothing pending, it stays not_found, says what
// became of the token and points at `meshctl token list`. A pending worker token
// under the id is named and left alone. While a control node of older rules may
// run, the cancellation goes unstamped, and cancels alike.
func TestControlRemoveOfANodeNeverAdmittedCancelsItsToken(t *testing.T) {
	d := fleet(t, 0)
	mint := func(id, node, role string) {
		t.Helper()
		c := &state.CreateTokenCmd{ID: id, Node: node, Role: role, TTL: time.Hour}
		if role == state.RoleControl {
			c.Control = &state.ControlAddrs{Broker: "10.0.0.9:7300", Raft: "10.0.0.9:7301", Cluster: "10.0.0.9:7302", Pin: "p9", Operator: "UOP9"}
			c.Sealed = []byte("sealed")
		}
		if res, err := d.raft.Apply(state.Command{Op: state.OpCreateToken, At: d.now().UTC(), CreateToken: c}, time.Minute); err != nil || res.Err != nil {
			t.Fatalf("mint for %s: %v %v", node, err, res.Err)
		}
	}
	tokenState := func(id string) (st string) {
		d.fsm.Read(func(s *state.State) { st = s.Tokens[id].StateAt(d.now()) })
		return st
	}
	idP := strings.Repeat("a1", 32)
	mint(idP, "cp-p", state.RoleControl)

	res, err := d.controlRemove(api.ControlRequest{Node: "cp-p"})
	if err != nil {
		t.Fatalf("control remove of cp-p, never admitted, with a pending control token: %v; want its token cancelled, exit 0", err)
	}
	if !res.NeverAdmitted || len(res.CancelledTokens) != 1 || res.CancelledTokens[0].ID != idP[:12] || res.CancelledTokens[0].State != state.TokenCancelled ||
		res.AlreadyRemoved || len(res.PendingTokens) != 0 {
		t.Fatalf("answer %+v; want never_admitted and token %s cancelled", res, idP[:12])
	}
	if st := tokenState(idP); st != state.TokenCancelled {
		t.Fatalf("cp-p's control token is %s after the removal, want cancelled", st)
	}
	// The join that comes after: refused.
	adm, err := d.raft.Apply(state.Command{Op: state.OpEnrol, At: d.now().UTC(), Rules: d.admissionRules(state.RoleControl),
		Enrol: &state.EnrolCmd{TokenID: idP, Node: "cp-p", Role: state.RoleControl, PublicKey: "KP", CurveKey: "XP"}}, time.Minute)
	if err != nil || !errors.Is(adm.Err, state.ErrTokenCancelled) {
		t.Fatalf("admission with the cancelled token: %v %v, want %v", err, adm.Err, state.ErrTokenCancelled)
	}

	// Run again: nothing pending, not_found, saying so and where to look.
	var ae *api.Error
	_, err = d.controlRemove(api.ControlRequest{Node: "cp-p"})
	if !errors.As(err, &ae) || ae.Code != api.CodeNotFound || !strings.Contains(ae.Message, "no control token for it is pending") ||
		!strings.Contains(ae.Message, idP[:12]+", is cancelled at") || !strings.Contains(ae.Message, "meshctl token list --node cp-p") {
		t.Fatalf("control remove of cp-p run again: %v; want not_found saying its token was cancelled and naming meshctl token list", err)
	}
	// A worker token under an id: named, left pending.
	idW := strings.Repeat("b2", 32)
	mint(idW, "web-9", state.RoleWorker)
	_, err = d.controlRemove(api.ControlRequest{Node: "web-9"})
	if !errors.As(err, &ae) || ae.Code != api.CodeNotFound || !strings.Contains(ae.Message, "pending worker token "+idW[:12]) ||
		!strings.Contains(ae.Message, "meshctl token cancel web-9 "+idW[:12]) {
		t.Fatalf("control remove of web-9, which has a worker token: %v; want not_found naming it", err)
	}
	if st := tokenState(idW); st != state.TokenPending {
		t.Fatalf("web-9's worker token is %s after control remove, want pending", st)
	}
	// An enrolled host named: the command that takes it out is said (a docs
	// walkthrough: control remove web-1 said only that no control node was).
	idH := strings.Repeat("d4", 32)
	mint(idH, "web-7", state.RoleWorker)
	if res, err := d.raft.Apply(state.Command{Op: state.OpEnrol, At: d.now().UTC(), Rules: d.admissionRules(state.RoleWorker),
		Enrol: &state.EnrolCmd{TokenID: idH, Node: "web-7", Role: state.RoleWorker, PublicKey: "KH"}}, time.Minute); err != nil || res.Err != nil {
		t.Fatalf("enrol web-7: %v %v", err, res.Err)
	}
	_, err = d.controlRemove(api.ControlRequest{Node: "web-7"})
	if !errors.As(err, &ae) || ae.Code != api.CodeNotFound || !strings.Contains(ae.Message, "web-7 is a host (a worker): meshctl revoke web-7 takes it out") {
		t.Fatalf("control remove of web-7, an enrolled host: %v; want not_found naming meshctl revoke", err)
	}

	// cp-2 applies the rules before tokens were cancelled by name: the command goes
	// unstamped, and cancels the one pending control token all the same.
	d.ctl.beat(api.ControlHeartbeat{V: api.ProtocolVersion, Node: "cp-2", Raft: api.RaftVoter, Rules: state.RulesBrokersWhenServing}, d.now(), 0)
	idQ := strings.Repeat("c3", 32)
	mint(idQ, "cp-q", state.RoleControl)
	if res, err := d.controlRemove(api.ControlRequest{Node: "cp-q"}); err != nil || len(res.CancelledTokens) != 1 || res.CancelledTokens[0].ID != idQ[:12] {
		t.Fatalf("control remove of cp-q while cp-2 runs older rules: %+v, %v; want its token cancelled", res, err)
	}
	if st := tokenState(idQ); st != state.TokenCancelled {
		t.Fatalf("cp-q's control token is %s, want cancelled", st)
	}
}
