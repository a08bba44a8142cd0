package integration

import (
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/integration/harness"
	"mesh/tokenfmt"
)

// TestTokenListAndCancel: an operator lists the tokens the mesh remembers (never a
// secret) and cancels a node's pending token, named in the answer, which then admits
// nothing, while the other tokens keep working. Cancelling again with nothing pending
// cancels nothing; cancelling for a node the mesh has no token for is refused with
// its own message.
func TestTokenListAndCancel(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "tokens")
	cp.Serve()
	web1 := cp.Token("web-1", "--label", "tier=web")
	web2 := cp.Token("web-2")
	web3 := cp.Token("web-3", "--ttl", "5m")

	list := func(extra ...string) api.TokenListResult {
		t.Helper()
		r := cp.Ctl(append([]string{"token", "list", "--json"}, extra...)...)
		if r.Code != 0 {
			t.Fatalf("token list (%d): %s", r.Code, r.Combined())
		}
		for _, tok := range []string{web1, web2} {
			parsed, err := tokenfmt.Parse(strings.TrimSpace(tok), time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if s := hex.EncodeToString(parsed.Secret[:]); strings.Contains(strings.ToLower(r.Stdout), s) || strings.Contains(r.Stdout, strings.TrimSpace(tok)) {
				t.Fatalf("token list shows a secret:\n%s", r.Stdout)
			}
		}
		var res api.TokenListResult
		if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil {
			t.Fatalf("token list --json: %v\n%s", err, r.Stdout)
		}
		return res
	}
	states := func(res api.TokenListResult) map[string]string {
		out := map[string]string{}
		for _, tv := range res.Tokens {
			out[tv.Node] = tv.State
		}
		return out
	}

	res := list()
	if got := states(res); len(got) != 3 || got["web-1"] != "pending" || got["web-2"] != "pending" || got["web-3"] != "pending" {
		t.Fatalf("fresh tokens: %v", got)
	}
	if tv := res.Tokens[0]; tv.Node != "web-1" || tv.Role != "worker" || tv.Labels["tier"] != "web" || len(tv.ID) != 12 ||
		time.Until(tv.ExpiresAt) < 10*time.Minute || time.Until(tv.ExpiresAt) > 16*time.Minute {
		t.Fatalf("web-1's token as listed: %+v", tv)
	}
	if got := list("--node", "web-3").Tokens; len(got) != 1 || got[0].Node != "web-3" {
		t.Fatalf("token list --node web-3: %+v", got)
	}

	h2 := harness.NewHost(t, bin, "web-2")
	if r := h2.Enrol(web2); r.Code != 0 {
		t.Fatalf("enrol web-2: %s", r.Combined())
	}

	r := cp.Ctl("token", "cancel", "web-1")
	if r.Code != 0 || !strings.Contains(r.Stdout, "cancelled token "+res.Tokens[0].ID+" of web-1 (minted ") || !strings.Contains(r.Stdout, "labels tier=web") {
		t.Fatalf("token cancel web-1 (%d): %s", r.Code, r.Combined())
	}
	// The cancelled token admits nothing, and the machine is told why.
	h1 := harness.NewHost(t, bin, "web-1")
	if r := h1.Enrol(web1); r.Code != hostExitToken || !strings.Contains(r.Stderr, "token_cancelled") || !strings.Contains(r.Stderr, "cancelled by an operator") {
		t.Fatalf("enrol with a cancelled token (exit %d): %s", r.Code, r.Combined())
	}
	if _, ok := cp.Node("web-1"); ok {
		t.Fatal("a cancelled token enrolled its node")
	}
	if got := states(list()); got["web-1"] != "cancelled" || got["web-2"] != "used" || got["web-3"] != "pending" {
		t.Fatalf("after enrol and cancel: %v", got)
	}

	// Run twice: nothing left to cancel, exit 0. A used token is not cancelled.
	if r := cp.Ctl("token", "cancel", "web-1"); r.Code != 0 || !strings.Contains(r.Stdout, "nothing to cancel") {
		t.Fatalf("token cancel web-1 again (%d): %s", r.Code, r.Combined())
	}
	if r := cp.Ctl("token", "cancel", "web-2", "--json"); r.Code != 0 || !strings.Contains(r.Stdout, `"cancelled": []`) {
		t.Fatalf("token cancel of a used token (%d): %s", r.Code, r.Combined())
	}
	if r := cp.Ctl("token", "cancel", "nobody"); r.Code != 4 || !strings.Contains(r.Stderr, "no token for this node") {
		t.Fatalf("token cancel for a node without tokens (%d): %s", r.Code, r.Combined())
	}
	for _, bad := range [][]string{
		{"token", "cancel"},
		{"token", "cancel", "Web_1"},
		{"token", "list", "extra"},
		{"token", "list", "--ttl", "5m"},
		{"token", "cancel", "web-3", "--role", "control"},
	} {
		if r := cp.Ctl(bad...); r.Code != 2 {
			t.Errorf("%v: exit %d, want 2 (usage): %s", bad, r.Code, r.Combined())
		}
	}
	if got := states(list()); got["web-3"] != "pending" {
		t.Fatalf("web-3's token after the other cancellations: %v", got)
	}

	// The table for people: labels as key=value, the state spelled out.
	r = cp.Ctl("token", "list")
	if r.Code != 0 || !strings.Contains(r.Stdout, "tier=web") || !strings.Contains(r.Stdout, "cancelled") || !strings.Contains(r.Stdout, "STATE") {
		t.Fatalf("token list (%d): %s", r.Code, r.Combined())
	}

	// The shell asks which node's token to cancel: those with a pending one.
	r = harness.Run(t, "", nil, bin.Meshctl, "__complete", "token", "cancel", "--data", cp.Dir, "")
	if r.Code != 0 || !strings.Contains(r.Stdout, "web-3\tworker token") || strings.Contains(r.Stdout, "web-1") || strings.Contains(r.Stdout, "web-2") {
		t.Fatalf("completing token cancel's node: exit %d\n%s", r.Code, r.Combined())
	}
	// Then its pending token's id, the node named either way, and none once named.
	pendingID := list("--node", "web-3").Tokens[0].ID
	for _, form := range [][]string{{"web-3", ""}, {"--node", "web-3", ""}} {
		r = harness.Run(t, "", nil, bin.Meshctl, append([]string{"__complete", "token", "cancel", "--data", cp.Dir}, form...)...)
		if r.Code != 0 || !strings.Contains(r.Stdout, pendingID+"\tpending, minted ") || strings.Contains(r.Stdout, "worker token") {
			t.Fatalf("completing token cancel %v: exit %d, want %s offered\n%s", form, r.Code, pendingID, r.Combined())
		}
	}
	r = harness.Run(t, "", nil, bin.Meshctl, "__complete", "token", "cancel", "--data", cp.Dir, "web-3", pendingID, "")
	if r.Code != 0 || strings.Contains(r.Stdout, pendingID) {
		t.Fatalf("completing token cancel's ids once named: exit %d\n%s", r.Code, r.Combined())
	}

	// One pending token a node: a second is refused, naming the first, and changes
	// nothing; --replace cancels the first and says so on stderr, stdout being the
	// token alone.
	if r := cp.Ctl("token", "--node", "web-3"); r.Code != 4 || !strings.Contains(r.Stderr, "token_pending") && !strings.Contains(r.Stderr, "a token for this node is pending") ||
		!strings.Contains(r.Stderr, "--replace") || r.Stdout != "" {
		t.Fatalf("a second token for web-3 (exit %d): %s", r.Code, r.Combined())
	}
	if got := list("--node", "web-3").Tokens; len(got) != 1 || got[0].State != "pending" {
		t.Fatalf("web-3's tokens after the refused second: %+v", got)
	}
	r = cp.Ctl("token", "--node", "web-3", "--replace")
	if r.Code != 0 || !strings.Contains(r.Stderr, "cancelled token") || strings.Count(strings.TrimSpace(r.Stdout), "\n") != 0 {
		t.Fatalf("token --replace for web-3 (exit %d): %s", r.Code, r.Combined())
	}
	replacement := r.Stdout
	h3 := harness.NewHost(t, bin, "web-3")
	if r := h3.Enrol(web3); r.Code != hostExitToken || !strings.Contains(r.Stderr, "token_cancelled") {
		t.Fatalf("enrol with the replaced token (exit %d): %s", r.Code, r.Combined())
	}
	if r := h3.Enrol(replacement); r.Code != 0 {
		t.Fatalf("enrol web-3 with its replacement token: %s", r.Combined())
	}
}

// TestEveryOperatorOperationIsServed: each operation of the operator API answers
// (a malformed request is refused as such, not as an unknown operation), so the API
// the docs list is the API the control plane serves.
func TestEveryOperatorOperationIsServed(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "ops")
	cp.Serve()
	nc := cp.OperatorConn()
	for _, op := range api.AdminOps() {
		msg, err := nc.Request(api.AdminSubject(op), []byte(`{"v":2,"op":"`+op+`","args":1}`), 5*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		var resp api.AdminResponse
		if err := json.Unmarshal(msg.Data, &resp); err != nil {
			t.Fatalf("%s: %v: %s", op, err, msg.Data)
		}
		switch {
		case op == api.OpPing:
			if resp.Error != nil {
				t.Errorf("ping: %+v", resp.Error)
			}
		case resp.Error == nil || resp.Error.Code != api.CodeBadRequest:
			t.Errorf("%s with malformed arguments: %s, want bad_request", op, msg.Data)
		}
	}
}

// TestRevokeRunAgainAfterReEnrolment (audit of commands run twice, interrupted and
// concurrent, finding 6): `meshctl revoke web-3`, run again after a new machine
// enrolled as web-3, revoked the new machine and printed what the first revocation
// had printed, word for word. It names the key it revoked and when that machine
// enrolled, and says the id was revoked once before, and when; with --key the first
// machine's key, the rerun is refused (exit 4, key_mismatch) and revokes nothing.
func TestRevokeRunAgainAfterReEnrolment(t *testing.T) {
	t.Parallel()
	cp := harness.NewControlPlane(t, bin, "revagain")
	cp.Serve()
	first := harness.NewHost(t, bin, "web-3")
	if r := first.Enrol(cp.Token("web-3")); r.Code != 0 {
		t.Fatalf("enrol web-3: %s", r.Combined())
	}
	n, _ := cp.Node("web-3")
	firstKey := n.PublicKey
	r := cp.Ctl("revoke", "--key", firstKey, "web-3")
	if r.Code != 0 || !strings.Contains(r.Stdout, "revoked web-3 (key "+firstKey+", enrolled ") || strings.Contains(r.Stdout, "before") {
		t.Fatalf("revoke web-3 (exit %d): %s", r.Code, r.Combined())
	}
	second := harness.NewHost(t, bin, "web-3")
	if r := second.Enrol(cp.Token("web-3")); r.Code != 0 {
		t.Fatalf("enrol web-3's second machine: %s", r.Combined())
	}
	n, _ = cp.Node("web-3")
	secondKey := n.PublicKey
	r = cp.Ctl("revoke", "--key", firstKey, "web-3")
	if r.Code != 4 || !strings.Contains(r.Stderr, "key_mismatch") || !strings.Contains(r.Stderr, "nothing was revoked") ||
		// The command it suggests runs as pasted: with the --data that reached
		// the mesh (a walkthrough: without it, exit 2).
		!strings.Contains(r.Stderr, "meshctl revoke --data "+cp.Dir+" --key "+secondKey+" web-3") {
		t.Fatalf("revoke --key of the first machine run again (exit %d): %s", r.Code, r.Combined())
	}
	if n, _ := cp.Node("web-3"); n.State == "revoked" {
		t.Fatal("the refused revocation revoked the second machine")
	}
	r = cp.Ctl("revoke", "web-3", "--json")
	var res api.RevokeResult
	if err := json.Unmarshal([]byte(r.Stdout), &res); r.Code != 0 || err != nil || len(res.Revoked) != 1 || res.Revoked[0].PublicKey != secondKey ||
		res.Revoked[0].EarlierRevocations != 1 || res.Revoked[0].EarlierRevokedAt.IsZero() {
		t.Fatalf("revoke web-3 run again without --key (exit %d): %v\n%s", r.Code, err, r.Combined())
	}
	if r := cp.Ctl("revoke", "web-3"); r.Code != 0 || !strings.Contains(r.Stdout, "web-3 was already revoked (key "+secondKey) ||
		!strings.Contains(r.Stdout, "web-3 was also revoked once before that, at ") || strings.Contains(r.Stdout, "did not mean to") {
		t.Fatalf("revoke web-3 a third time (exit %d): %s", r.Code, r.Combined())
	}
}
