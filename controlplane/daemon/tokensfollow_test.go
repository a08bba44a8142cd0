package daemon

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
)

// TestTokensFollowNodesOnceEveryControlNodeDoes: one pending token a node, tokens
// replaced with --replace, and revocations that cancel their nodes' tokens are rules
// a control node of an older meshctl applies otherwise (state.RulesTokensFollowNodes).
// While one serves, the leader proposes worker tokens and revocations by the earlier
// rules, and refuses a replacement, naming the node to upgrade; once every serving
// control node announces the new rules, they apply.
func TestTokensFollowNodesOnceEveryControlNodeDoes(t *testing.T) {
	d := fleet(t, 0)
	mint := func(node string, replace bool) (api.TokenCreateResult, error) {
		var id [32]byte
		rand.Read(id[:])
		return d.createToken(api.TokenCreateRequest{ID: hex.EncodeToString(id[:]), ProofKey: hex.EncodeToString(id[:]), Node: node,
			Role: state.RoleWorker, TTL: api.Duration(time.Hour), Replace: replace})
	}
	pending := func(node string) (n int) {
		d.fsm.Read(func(s *state.State) { n = len(s.PendingTokens(node, d.now())) })
		return n
	}

	// cp-2 applies the log by the rules before (it records sealed control tokens).
	d.ctl.beat(api.ControlHeartbeat{V: api.ProtocolVersion, Node: "cp-2", Raft: api.RaftVoter, Rules: state.RulesSealedTo}, d.now(), 0)
	for range 2 {
		if _, err := mint("web-1", false); err != nil {
			t.Fatalf("a worker token while cp-2 serves the earlier rules: %v", err)
		}
	}
	if n := pending("web-1"); n != 2 {
		t.Fatalf("%d pending tokens for web-1 under the earlier rules, want 2 (as cp-2 records them)", n)
	}
	_, err := mint("web-1", true)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeOlderControlNode || !strings.Contains(ae.Message, "cp-2") || !strings.Contains(ae.Message, "meshctl token cancel web-1") {
		t.Fatalf("--replace while cp-2 serves: %v, want %s naming cp-2 and the way round", err, api.CodeOlderControlNode)
	}
	if n := pending("web-1"); n != 2 {
		t.Fatalf("the refused replacement changed the tokens: %d pending", n)
	}

	// cp-2 upgraded.
	d.ctl.beat(api.ControlHeartbeat{V: api.ProtocolVersion, Node: "cp-2", Raft: api.RaftVoter, Rules: state.ApplyRules}, d.now(), 0)
	if _, err := mint("web-1", false); !errors.As(err, &ae) || ae.Code != api.CodeTokenPending || !strings.Contains(ae.Message, "--replace") {
		t.Fatalf("a third token for web-1: %v, want %s", err, api.CodeTokenPending)
	}
	res, err := mint("web-1", true)
	if err != nil || len(res.Replaced) != 2 || res.Replaced[0].State != state.TokenCancelled || res.Replaced[0].Node != "web-1" {
		t.Fatalf("--replace: %v, replaced %+v; want both earlier tokens cancelled and listed", err, res.Replaced)
	}
	if n := pending("web-1"); n != 1 {
		t.Fatalf("%d pending tokens for web-1 after the replacement, want 1", n)
	}

	// A revocation of an id that is only minted says what would still enrol it.
	_, err = d.revoke(api.RevokeRequest{Nodes: []string{"web-1"}})
	if !errors.As(err, &ae) || ae.Code != api.CodeNotFound || !strings.Contains(ae.Message, "1 pending token") || !strings.Contains(ae.Message, "token cancel") {
		t.Fatalf("revoking web-1, minted and not enrolled: %v, want not_found naming its pending token", err)
	}
}

// TestAMemberCountsByItsLastHeartbeat: a member of Raft this node never heard (a
// leader that just started, a member admitted since) may run an older meshctl, which
// stops at an entry stamped with rules it lacks: commands are proposed by the earlier
// rules until it announces the new ones. A member heard on the new rules keeps
// counting by them while it is stopped, killed or cut off: it comes back on the
// version it ran, or a newer one. Before, a control node down for maintenance lifted
// the token and label rules, without a word (an operations audit, 2026-12-05).
func TestAMemberCountsByItsLastHeartbeat(t *testing.T) {
	d := fleet(t, 0)
	if got := d.rulesFor(state.RulesTokensFollowNodes); got != state.RulesTokensFollowNodes {
		t.Fatalf("alone: rules %d, want %d", got, state.RulesTokensFollowNodes)
	}
	if err := d.raft.AddNonvoter("cp-2", "127.0.0.1:1", time.Minute); err != nil {
		t.Fatal(err)
	}
	if got, who := d.rulesFor(state.RulesTokensFollowNodes), d.notOnRules(state.RulesTokensFollowNodes); got != 0 || len(who) != 1 || who[0] != "cp-2" {
		t.Fatalf("with cp-2 a member never heard: rules %d, not on them %v; want 0 and cp-2", got, who)
	}
	d.ctl.beat(api.ControlHeartbeat{V: api.ProtocolVersion, Node: "cp-2", Raft: api.RaftNonvoter, Rules: state.ApplyRules}, d.now(), 0)
	if got := d.rulesFor(state.RulesTokensFollowNodes); got != state.RulesTokensFollowNodes {
		t.Fatalf("cp-2 heard on the current rules: rules %d, want %d", got, state.RulesTokensFollowNodes)
	}
	d.ctl.beat(api.ControlHeartbeat{V: api.ProtocolVersion, Node: "cp-2", Raft: api.RaftNonvoter, Rules: state.ApplyRules, Stopping: true}, d.now(), 0)
	if got := d.rulesFor(state.RulesTokensFollowNodes); got != state.RulesTokensFollowNodes {
		t.Fatalf("cp-2 stopped on the current rules: rules %d, want %d", got, state.RulesTokensFollowNodes)
	}
	later := func() time.Time { return time.Now().Add(time.Hour) }
	d.opts.Now = later
	if got := d.rulesFor(state.RulesTokensFollowNodes); got != state.RulesTokensFollowNodes {
		t.Fatalf("cp-2 not heard for an hour, last on the current rules: rules %d, want %d", got, state.RulesTokensFollowNodes)
	}
	d.ctl.beat(api.ControlHeartbeat{V: api.ProtocolVersion, Node: "cp-2", Raft: api.RaftNonvoter, Rules: state.RulesSealedTo}, later(), 0)
	if got, who := d.rulesFor(state.RulesTokensFollowNodes), d.notOnRules(state.RulesTokensFollowNodes); got != 0 || len(who) != 1 {
		t.Fatalf("cp-2 back on older rules: rules %d, not on them %v; want 0 and cp-2", got, who)
	}
	d.ctl.beat(api.ControlHeartbeat{V: api.ProtocolVersion, Node: "cp-2", Raft: api.RaftNonvoter, Rules: state.RulesSealedTo, Stopping: true}, later(), 0)
	if got := d.rulesFor(state.RulesTokensFollowNodes); got != 0 {
		t.Fatalf("cp-2 stopped on older rules: rules %d, want 0", got)
	}
}

// TestTokenRulesFollowTheOldestMember: a mint or a revocation is stamped with the
// newest token rules every member announces: RulesPendingByRecord once all do,
// RulesTokensFollowNodes while one announces those (an upgrade from the version
// that brought them), none while one is older or not heard from.
func TestTokenRulesFollowTheOldestMember(t *testing.T) {
	d := fleet(t, 0)
	if got := d.tokenRules(); got != state.RulesPendingByRecord {
		t.Fatalf("alone: rules %d, want %d", got, state.RulesPendingByRecord)
	}
	if err := d.raft.AddNonvoter("cp-2", "127.0.0.1:1", time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ announced, want int }{
		{state.RulesTokensFollowNodes, state.RulesTokensFollowNodes},
		{state.RulesSealedTo, 0},
		{state.ApplyRules, state.RulesPendingByRecord},
	} {
		d.ctl.beat(api.ControlHeartbeat{V: api.ProtocolVersion, Node: "cp-2", Raft: api.RaftNonvoter, Rules: c.announced}, d.now(), 0)
		if got := d.tokenRules(); got != c.want {
			t.Fatalf("cp-2 announcing rules %d: token rules %d, want %d", c.announced, got, c.want)
		}
	}
}

func TestControlNodesRun(t *testing.T) {
	if got := controlNodesRun([]string{"cp-2"}); got != "control node cp-2 runs" {
		t.Errorf("one: %q", got)
	}
	if got := controlNodesRun([]string{"cp-2", "cp-3"}); got != "control nodes cp-2, cp-3 run" {
		t.Errorf("two: %q", got)
	}
}

// TestAMemberNeverHeardDoesNotLiftRulesTheStateWasBuiltBy: a control node joined and
// not yet serving, or down as the leader started, is a member never heard. Once an
// entry stamped with a revision of the rules committed (State.Rules), every node
// still applying the log applies it by those rules or later ones: one on older
// rules stopped at that entry, and a joiner was checked against them as it was
// admitted. Counting the member as older lifted them (a review: two operators
// minted a pending token each for one node, and `--replace` was refused as if
// cp-2 ran an older meshctl). Rules newer than the state's still wait for it.
func TestAMemberNeverHeardDoesNotLiftRulesTheStateWasBuiltBy(t *testing.T) {
	d := fleet(t, 0)
	mint := func(node string) error {
		var id [32]byte
		rand.Read(id[:])
		_, err := d.createToken(api.TokenCreateRequest{ID: hex.EncodeToString(id[:]), ProofKey: hex.EncodeToString(id[:]), Node: node,
			Role: state.RoleWorker, TTL: api.Duration(time.Hour)})
		return err
	}
	if err := mint("web-1"); err != nil { // alone: stamped RulesPendingByRecord
		t.Fatal(err)
	}
	var built int
	d.fsm.Read(func(s *state.State) { built = s.Rules })
	if built != state.RulesPendingByRecord {
		t.Fatalf("the state was built by rules %d, want %d", built, state.RulesPendingByRecord)
	}
	if err := d.raft.AddNonvoter("cp-2", "127.0.0.1:1", time.Minute); err != nil {
		t.Fatal(err)
	}
	if got, who := d.tokenRules(), d.notOnRules(state.RulesTokensFollowNodes); got != state.RulesPendingByRecord || len(who) != 0 {
		t.Fatalf("cp-2 never heard, the state built by rules %d: token rules %d, not on them %v; want %d and none", built, got, who, state.RulesPendingByRecord)
	}
	var ae *api.Error
	if err := mint("web-1"); !errors.As(err, &ae) || ae.Code != api.CodeTokenPending {
		t.Fatalf("a second token for web-1 with cp-2 never heard: %v, want token_pending", err)
	}
	if got, who := d.rulesFor(state.RulesRequests), d.notOnRules(state.RulesRequests); got != 0 || len(who) != 1 || who[0] != "cp-2" {
		t.Fatalf("rules %d, newer than the state's: %d, not on them %v; want 0 and cp-2", state.RulesRequests, got, who)
	}
}

// TestAReplacingMintSentAgainNamesWhatItReplaced: meshctl sends a token request
// again when no answer came; the first sending's --replace cancelled a pending
// token, perhaps one another operator handed out, and the answer to the second
// named none (a review): it names the same, cancelled by the first.
func TestAReplacingMintSentAgainNamesWhatItReplaced(t *testing.T) {
	d := fleet(t, 0)
	req := func(replace bool) api.TokenCreateRequest {
		var id [32]byte
		rand.Read(id[:])
		return api.TokenCreateRequest{ID: hex.EncodeToString(id[:]), ProofKey: hex.EncodeToString(id[:]), Node: "web-1",
			Role: state.RoleWorker, TTL: api.Duration(time.Hour), Replace: replace}
	}
	theirs := req(false)
	if _, err := d.createToken(theirs); err != nil {
		t.Fatal(err)
	}
	mine := req(true)
	for _, sending := range []string{"first", "again"} {
		res, err := d.createToken(mine)
		if err != nil || len(res.Replaced) != 1 || res.Replaced[0].ID != theirs.ID[:api.TokenIDLen] || res.Replaced[0].State != state.TokenCancelled {
			t.Fatalf("%s sending: replaced %+v, %v; want %s, cancelled", sending, res.Replaced, err, theirs.ID[:api.TokenIDLen])
		}
	}
}
