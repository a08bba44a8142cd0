package state

import (
	"errors"
	"testing"
	"time"
)

// cancelByID is a cancellation of node's tokens ids at at, stamped with rules.
func cancelByID(node string, at time.Time, rules int, ids ...string) Command {
	return Command{Op: OpCancelTokens, At: at, Rules: rules, CancelTokens: &CancelTokensCmd{Node: node, IDs: ids}}
}

// TestACancellationByIDLeavesATokenMintedSince (operations audit, finding 2):
// operator A looks, sees db-1's leaked token tok-a, and cancels db-1; meanwhile B
// mints db-1 a new one with --replace (tok-b, cancelling tok-a). A cancellation by
// node cancelled tok-b, the token B had just handed out, and both operators were told
// it went well. Under RulesCancelByID a cancellation naming tok-a cancels nothing
// more: tok-a is reported not pending (cancelled already), tok-b still pending and
// left so. The same entry under older rules, which ignore the names, cancels tok-b:
// which is why it is stamped. A name that is no token of the node refuses the whole
// command; a named token still pending is cancelled, and only it.
func TestACancellationByIDLeavesATokenMintedSince(t *testing.T) {
	at := t0.Add(2 * time.Minute)
	raced := func() *machine {
		m := enrolled(t, map[string]string{"web-1": RoleWorker})
		m.must(stamped(tokenCmd("tok-a", "db-1", RoleWorker, at, 15*time.Minute)))
		replace := stamped(tokenCmd("tok-b", "db-1", RoleWorker, at.Add(time.Second), 15*time.Minute))
		replace.CreateToken.Replace = true
		m.must(replace)
		return m
	}

	older := raced().must(cancelByID("db-1", at.Add(2*time.Second), RulesPendingByRecord, "tok-a"))
	if len(older.Tokens) != 1 || older.Tokens[0].ID != "tok-b" {
		t.Fatalf("under the older rules the names are ignored: cancelled %+v, want tok-b", older.Tokens)
	}

	m := raced()
	r := m.must(cancelByID("db-1", at.Add(2*time.Second), RulesCancelByID, "tok-a"))
	if len(r.Tokens) != 0 {
		t.Fatalf("cancelling tok-a by name cancelled %+v", r.Tokens)
	}
	if len(r.NotPending) != 1 || r.NotPending[0].ID != "tok-a" || r.NotPending[0].StateAt(at.Add(2*time.Second)) != TokenCancelled {
		t.Fatalf("not pending: %+v, want tok-a (cancelled by the replacement)", r.NotPending)
	}
	if len(r.StillPending) != 1 || r.StillPending[0].ID != "tok-b" {
		t.Fatalf("still pending: %+v, want tok-b", r.StillPending)
	}
	if got := m.state().Tokens["tok-b"].StateAt(at.Add(2 * time.Second)); got != TokenPending {
		t.Fatalf("tok-b is %s, want pending: it was minted after the operator looked", got)
	}

	// A name that is none of the node's tokens (a typo, another node's token)
	// refuses the whole command.
	m.must(stamped(tokenCmd("tok-c", "web-9", RoleWorker, at, 15*time.Minute)))
	before := m.snapshot()
	if r := m.apply(cancelByID("db-1", at.Add(3*time.Second), RulesCancelByID, "tok-b", "tok-c")); !errors.Is(r.Err, ErrNoSuchToken) {
		t.Fatalf("naming web-9's token for db-1: %v, want ErrNoSuchToken", r.Err)
	}
	if string(m.snapshot()) != string(before) {
		t.Fatal("a refused cancellation changed the state")
	}

	// Named and pending: cancelled, it alone. Run again: nothing more.
	r = m.must(cancelByID("db-1", at.Add(3*time.Second), RulesCancelByID, "tok-b", "tok-b"))
	if len(r.Tokens) != 1 || r.Tokens[0].ID != "tok-b" || len(r.StillPending) != 0 {
		t.Fatalf("cancelling tok-b by name: cancelled %+v, still pending %+v", r.Tokens, r.StillPending)
	}
	r = m.must(cancelByID("db-1", at.Add(4*time.Second), RulesCancelByID, "tok-b"))
	if len(r.Tokens) != 0 || len(r.NotPending) != 1 || r.NotPending[0].ID != "tok-b" {
		t.Fatalf("cancelling tok-b again: cancelled %+v, not pending %+v", r.Tokens, r.NotPending)
	}
	if got := m.state().Tokens["tok-c"].StateAt(at.Add(4 * time.Second)); got != TokenPending {
		t.Fatalf("web-9's token is %s, want pending", got)
	}
}
