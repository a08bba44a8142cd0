package integration

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"mesh/controlplane/api"
	"mesh/integration/harness"
)

// TestTokenCancelLeavesATokenMintedSince, with the built binaries (operations audit,
// finding 2): operator A sees db-1's leaked token; operator B mints db-1 a new one
// with --replace (which cancels the leaked one) and hands it out; A then cancels the
// token A saw. `token cancel db-1` cancelled B's new token, and both were told it went
// well. Named, A's cancellation cancels nothing more: it says A's token was cancelled
// already, names B's as pending and left (on stderr, and with --json), and B's token
// enrols the new machine. Named again, a token is reported, never cancelled twice; a
// name that is no token of the node is refused (exit 4) and changes nothing.
func TestTokenCancelLeavesATokenMintedSince(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "tokcancel")
	cp.Serve()
	tokens := func(node string) []api.TokenView {
		t.Helper()
		r := cp.Ctl("token", "list", "--node", node, "--json")
		var res api.TokenListResult
		if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &res) != nil {
			t.Fatalf("token list (%d): %s", r.Code, r.Combined())
		}
		return res.Tokens
	}
	cp.Token("db-1", "--label", "tier=db")
	seen := tokens("db-1")
	if len(seen) != 1 || seen[0].State != "pending" {
		t.Fatalf("db-1's tokens: %+v", seen)
	}
	leaked := seen[0].ID

	r := cp.Ctl("token", "--node", "db-1", "--label", "tier=db", "--replace")
	if r.Code != 0 || strings.Contains(r.Stderr, "labels this one does not") {
		t.Fatalf("B's token --replace, with the same label (%d): %s", r.Code, r.Combined())
	}
	handedOut := r.Stdout
	var fresh string
	for _, tv := range tokens("db-1") {
		if tv.State == "pending" {
			fresh = tv.ID
		}
	}
	if fresh == "" || fresh == leaked {
		t.Fatalf("after --replace: %+v", tokens("db-1"))
	}

	r = cp.Ctl("token", "cancel", "db-1", leaked)
	if r.Code != 0 || strings.Contains(r.Stdout, "cancelled token") ||
		!strings.Contains(r.Stdout, "token "+leaked+" of db-1 was not pending: cancelled already") ||
		!strings.Contains(r.Stderr, "token "+fresh+" of db-1 (minted ") || !strings.Contains(r.Stderr, "is pending and was left") ||
		!strings.Contains(r.Stderr, "meshctl token cancel db-1 "+fresh) {
		t.Fatalf("A's token cancel db-1 %s (exit %d):\n%s", leaked, r.Code, r.Combined())
	}
	r = cp.Ctl("token", "cancel", "db-1", leaked, "--json")
	var res api.TokenCancelResult
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &res) != nil || len(res.Cancelled) != 0 ||
		len(res.NotPending) != 1 || res.NotPending[0].ID != leaked || res.NotPending[0].State != "cancelled" ||
		len(res.StillPending) != 1 || res.StillPending[0].ID != fresh {
		t.Fatalf("token cancel db-1 %s --json (exit %d):\n%s", leaked, r.Code, r.Combined())
	}
	// A name that is no token of db-1: refused, nothing cancelled.
	if r := cp.Ctl("token", "cancel", "db-1", fresh, "0123456789ab"); r.Code != 4 || !strings.Contains(r.Stderr, "no token 0123456789ab") {
		t.Fatalf("an unknown id (exit %d):\n%s", r.Code, r.Combined())
	}

	// B's token, handed out, still enrols its machine.
	h := harness.NewHost(t, bin, "db-1")
	if r := h.Enrol(handedOut); r.Code != 0 {
		t.Fatalf("enrol with B's token (exit %d): %s", r.Code, r.Combined())
	}
	if n, ok := cp.Node("db-1"); !ok || n.Labels["tier"] != "db" {
		t.Fatalf("db-1 after enrolment: %+v", n)
	}
	// Named once it is used: reported so, with the way to undo an enrolment.
	if r := cp.Ctl("token", "cancel", "db-1", fresh); r.Code != 0 || !strings.Contains(r.Stdout, "was not pending: it enrolled db-1") ||
		!strings.Contains(r.Stdout, "meshctl revoke db-1") {
		t.Fatalf("cancelling the used token by name (exit %d):\n%s", r.Code, r.Combined())
	}
	// A token minted again without the labels of the one it replaces says so, with
	// or without --out (a walkthrough: its machine enrolled without them).
	cp.Token("db-2", "--label", "tier=db", "--label", "env=prod")
	r = cp.Ctl("token", "--node", "db-2", "--replace", "--label", "env=prod")
	if r.Code != 0 || !strings.Contains(r.Stderr, "warning: the cancelled token gave db-2 labels this one does not: --label tier=db;") ||
		!strings.Contains(r.Stderr, "run the same command again with --replace and these labels: --label env=prod --label tier=db") {
		t.Fatalf("token --replace without a label of the token it replaces (exit %d):\n%s", r.Code, r.Combined())
	}
	// As the warning says: no warning then.
	if r := cp.Ctl("token", "--node", "db-2", "--replace", "--label", "env=prod", "--label", "tier=db"); r.Code != 0 || strings.Contains(r.Stderr, "warning") {
		t.Fatalf("token --replace as the warning said (exit %d):\n%s", r.Code, r.Combined())
	}
	out := filepath.Join(t.TempDir(), "db-2.txt")
	r = cp.Ctl("token", "--node", "db-2", "--replace", "--label", "env=prod", "--label", "tier=db", "--out", out)
	if r.Code != 0 || strings.Contains(r.Stderr, "warning") || strings.Count(r.Stderr, "cancelled token") != 1 {
		t.Fatalf("token --replace --out with the labels of the token it replaces (exit %d): want one cancelled line, no warning:\n%s", r.Code, r.Combined())
	}
	if r := cp.Ctl("token", "--node", "db-2", "--replace", "--out", filepath.Join(t.TempDir(), "db-2b.txt")); r.Code != 0 ||
		!strings.Contains(r.Stderr, "labels this one does not: --label env=prod --label tier=db;") {
		t.Fatalf("token --replace --out without the labels of the token it replaces (exit %d):\n%s", r.Code, r.Combined())
	}
}
