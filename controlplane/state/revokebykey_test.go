package state

import (
	"errors"
	"testing"
	"time"
)

// TestARevocationByKeyRevokesNoOtherMachine: `meshctl revoke --key K1 web-1` run
// again (a script retried) as a new machine enrols under web-1 with K2, between the
// leader's look at the state and the commit. Stamped RulesRevokeByKey, the command
// naming K1 revokes nothing (ErrKeyMismatch) and the new machine stays; with the
// key it holds it is revoked. Older rules ignore the keys and revoke the new
// machine, which is why the command is stamped. Keys of a node the command does not
// revoke make it malformed.
func TestARevocationByKeyRevokesNoOtherMachine(t *testing.T) {
	at := t0.Add(2 * time.Minute)
	revoke := func(rules int, keys map[string]string, nodes ...string) Command {
		return Command{Op: OpRevoke, At: at.Add(time.Minute), Rules: rules, Revoke: &RevokeCmd{Nodes: nodes, Keys: keys}}
	}
	raced := func() *machine {
		m := enrolled(t, map[string]string{"web-1": RoleWorker, "web-2": RoleWorker})
		m.must(revoke(RulesPendingByRecord, nil, "web-1"))
		m.must(stamped(tokenCmd("tok-new", "web-1", RoleWorker, at, time.Hour)))
		m.must(enrolCmd("tok-new", "web-1", RoleWorker, "K2", at.Add(time.Second)))
		return m
	}

	m := raced()
	r := m.apply(revoke(RulesRevokeByKey, map[string]string{"web-1": "K-web-1"}, "web-1", "web-2"))
	if !errors.Is(r.Err, ErrKeyMismatch) {
		t.Fatalf("revoking web-1 by its old key after K2 enrolled: %v, want ErrKeyMismatch", r.Err)
	}
	if s := m.state(); s.Nodes["web-1"].Revoked || s.Nodes["web-1"].PublicKey != "K2" || s.Nodes["web-2"].Revoked {
		t.Fatalf("a refused revocation changed the state: web-1 %+v, web-2 revoked %v", s.Nodes["web-1"], s.Nodes["web-2"].Revoked)
	}
	if r := m.apply(revoke(RulesRevokeByKey, map[string]string{"web-2": "K-web-2"}, "web-1")); !errors.Is(r.Err, ErrBadCommand) {
		t.Fatalf("keys of a node not revoked: %v, want ErrBadCommand", r.Err)
	}
	r = m.must(revoke(RulesRevokeByKey, map[string]string{"web-1": "K2"}, "web-1"))
	if len(r.Revoked) != 1 || r.Revoked[0].PublicKey != "K2" || !m.state().Nodes["web-1"].Revoked {
		t.Fatalf("revoking web-1 by the key it holds: %+v", r.Revoked)
	}

	older := raced()
	r = older.must(revoke(RulesPendingByRecord, map[string]string{"web-1": "K-web-1"}, "web-1"))
	if len(r.Revoked) != 1 || r.Revoked[0].PublicKey != "K2" {
		t.Fatalf("under the older rules the keys are ignored: revoked %+v, want K2", r.Revoked)
	}
}
