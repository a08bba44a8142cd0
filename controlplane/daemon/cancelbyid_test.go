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

// TestTokenCancelNamesWhatItCancels (operations audit, finding 2): `token cancel
// NODE` cancelled every token of the node pending when it applied, one another
// operator minted with --replace after this one looked included, and said only
// "cancelled 1 token(s)". A request naming its tokens cancels those still pending
// and nothing else, says which named ones were not pending, and names the token
// left pending; a request by node alone (an older meshctl) cancels as before.
// While a control node of older rules may run (they ignore the names), the names
// go only if nothing else of the node is pending, else older_control_node and
// nothing cancelled.
func TestTokenCancelNamesWhatItCancels(t *testing.T) {
	d := fleet(t, 0)
	mint := func(node string, replace bool) string {
		t.Helper()
		var id [32]byte
		rand.Read(id[:])
		if _, err := d.createToken(api.TokenCreateRequest{ID: hex.EncodeToString(id[:]), ProofKey: hex.EncodeToString(id[:]), Node: node,
			Role: state.RoleWorker, TTL: api.Duration(time.Hour), Replace: replace}); err != nil {
			t.Fatalf("mint for %s: %v", node, err)
		}
		return hex.EncodeToString(id[:])[:api.TokenIDLen]
	}
	pending := func(node string) (ids []string) {
		d.fsm.Read(func(s *state.State) {
			for _, t := range s.PendingTokens(node, d.now()) {
				ids = append(ids, t.ShortID())
			}
		})
		return ids
	}
	var ae *api.Error

	// A looks at db-1's tokens and sees a; B replaces a with b; A cancels a.
	a := mint("db-1", false)
	b := mint("db-1", true)
	res, err := d.cancelTokens(api.TokenCancelRequest{Node: "db-1", IDs: []string{a}})
	if err != nil || len(res.Cancelled) != 0 {
		t.Fatalf("cancelling %s by name: %+v, %v; want nothing cancelled", a, res, err)
	}
	if len(res.NotPending) != 1 || res.NotPending[0].ID != a || res.NotPending[0].State != state.TokenCancelled {
		t.Fatalf("not pending: %+v, want %s cancelled (by the replacement)", res.NotPending, a)
	}
	if len(res.StillPending) != 1 || res.StillPending[0].ID != b || res.StillPending[0].State != state.TokenPending {
		t.Fatalf("still pending: %+v, want %s", res.StillPending, b)
	}
	if got := pending("db-1"); len(got) != 1 || got[0] != b {
		t.Fatalf("db-1's pending tokens: %v, want %s, the one B handed out", got, b)
	}
	// Named, it is cancelled, and named in the answer.
	if res, err := d.cancelTokens(api.TokenCancelRequest{Node: "db-1", IDs: []string{b}}); err != nil || len(res.Cancelled) != 1 ||
		res.Cancelled[0].ID != b || res.Cancelled[0].State != state.TokenCancelled || len(res.StillPending) != 0 {
		t.Fatalf("cancelling %s by name: %+v, %v", b, res, err)
	}
	// A name that is none of the node's tokens: not_found naming it, nothing done.
	c := mint("db-1", false)
	if _, err := d.cancelTokens(api.TokenCancelRequest{Node: "db-1", IDs: []string{c, "0123456789ab"}}); !errors.As(err, &ae) ||
		ae.Code != api.CodeNotFound || !strings.Contains(ae.Message, "no token 0123456789ab") {
		t.Fatalf("an unknown id: %v, want not_found naming it", err)
	}
	if got := pending("db-1"); len(got) != 1 || got[0] != c {
		t.Fatalf("a refused cancellation changed db-1's tokens: %v", got)
	}
	for _, bad := range []string{"0123", "0123456789AB", strings.Repeat("a", 64)} {
		if _, err := d.cancelTokens(api.TokenCancelRequest{Node: "db-1", IDs: []string{bad}}); !errors.As(err, &ae) || ae.Code != api.CodeBadRequest {
			t.Fatalf("id %q: %v, want bad_request", bad, err)
		}
	}
	// By node alone, as an older meshctl asks: every pending token, as before.
	if res, err := d.cancelTokens(api.TokenCancelRequest{Node: "db-1"}); err != nil || len(res.Cancelled) != 1 || res.Cancelled[0].ID != c {
		t.Fatalf("cancelling db-1 by node: %+v, %v", res, err)
	}

	// cp-2 applies the rules before names, on a mesh whose state no entry stamped
	// with them built yet: on this one, cp-2 would have stopped at the first
	// cancellation by name (notOnRules).
	d = fleet(t, 0)
	d.ctl.beat(api.ControlHeartbeat{V: api.ProtocolVersion, Node: "cp-2", Raft: api.RaftVoter, Rules: state.RulesBrokersWhenServing}, d.now(), 0)
	e := mint("web-1", false)
	if res, err := d.cancelTokens(api.TokenCancelRequest{Node: "web-1", IDs: []string{e}}); err != nil || len(res.Cancelled) != 1 || res.Cancelled[0].ID != e {
		t.Fatalf("cancelling web-1's only pending token by name while cp-2 runs older rules: %+v, %v", res, err)
	}
	f := mint("web-1", false)
	g := mint("web-1", true)
	_, err = d.cancelTokens(api.TokenCancelRequest{Node: "web-1", IDs: []string{f}})
	if !errors.As(err, &ae) || ae.Code != api.CodeOlderControlNode || !strings.Contains(ae.Message, g) || !strings.Contains(ae.Message, "cp-2") ||
		!strings.Contains(ae.Message, "nothing was cancelled") {
		t.Fatalf("cancelling %s while %s, minted since, is pending and cp-2 runs older rules: %v, want %s naming %s and cp-2", f, g, err, api.CodeOlderControlNode, g)
	}
	if got := pending("web-1"); len(got) != 1 || got[0] != g {
		t.Fatalf("web-1's pending tokens after the refusal: %v, want %s", got, g)
	}
}
