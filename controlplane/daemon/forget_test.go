package daemon

import (
	"errors"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
)

// TestTheLeaderForgetsRevokedNodesAfterTheirRetention (leak audit, finding 1): a
// revoked node's record stayed in the state for ever. The leader forgets it
// state.RevokedRetention after the revocation, once every control node applies the
// rules of it; meanwhile, and before, the record stays. Forgotten, the id is told as
// what it was: a revocation run again answers revoked already, under its key, and
// one naming another key, labels and declarations are refused saying the record was
// forgotten.
func TestTheLeaderForgetsRevokedNodesAfterTheirRetention(t *testing.T) {
	log := &lockedBuffer{}
	d := loggedDaemon(t, log, nil)
	kp := enrolledKey(t, d, "web-1")
	key, _ := kp.PublicKey()
	enrolledKey(t, d, "web-2")
	if _, err := d.revoke(api.RevokeRequest{Node: "web-1"}); err != nil {
		t.Fatal(err)
	}
	var revokedAt time.Time
	d.fsm.Read(func(s *state.State) { revokedAt = s.Nodes["web-1"].RevokedAt })
	kept := func() bool {
		var ok bool
		d.fsm.Read(func(s *state.State) { _, ok = s.Nodes["web-1"] })
		return ok
	}

	d.forget(revokedAt.Add(state.RevokedRetention - time.Minute))
	if !kept() {
		t.Fatal("forgotten before its retention ended")
	}
	due := revokedAt.Add(state.RevokedRetention + time.Minute)
	d.ctl.beat(api.ControlHeartbeat{V: api.ProtocolVersion, Node: "cp-2", Raft: api.RaftVoter, Rules: state.RulesRevokeByKey}, d.now(), 0)
	d.forget(due)
	d.forget(due.Add(time.Minute))
	if !kept() {
		t.Fatal("forgotten while cp-2 applies older rules, which would keep it")
	}
	if n := strings.Count(log.String(), "records due to be forgotten are kept while a control node that may apply older rules is a member"); n != 1 ||
		!strings.Contains(log.String(), "older=[cp-2]") {
		t.Fatalf("held back by cp-2: %d lines saying so, want one naming it:\n%s", n, log.String())
	}
	d.ctl.beat(api.ControlHeartbeat{V: api.ProtocolVersion, Node: "cp-2", Raft: api.RaftVoter, Rules: state.ApplyRules}, d.now(), 0)
	d.forget(due)
	if kept() {
		t.Fatal("not forgotten after its retention, every control node on the rules")
	}
	d.fsm.Read(func(s *state.State) {
		if s.Nodes["web-2"] == nil || s.Forgotten["web-1"].RevokedAt.IsZero() {
			t.Fatalf("after forgetting web-1: web-2 %v, forgotten %+v", s.Nodes["web-2"], s.Forgotten)
		}
	})
	if !strings.Contains(log.String(), "revoked nodes' records forgotten") || !strings.Contains(log.String(), "first=[web-1]") {
		t.Fatalf("no line says web-1's record was forgotten:\n%s", log.String())
	}

	res, err := d.revoke(api.RevokeRequest{Node: "web-1"})
	if err != nil || len(res.Revoked) != 1 || res.Revoked[0].PublicKey != key || !res.Revoked[0].AlreadyRevokedAt.Equal(revokedAt) {
		t.Fatalf("revoke web-1 run again once forgotten: %+v, %v; want revoked already at %s under %s", res, err, revokedAt, key)
	}
	if res, err := d.revoke(api.RevokeRequest{Node: "web-1", Key: key}); err != nil || len(res.Revoked) != 1 {
		t.Fatalf("revoke --key its key once forgotten: %+v, %v", res, err)
	}
	other, _ := enrolledKey(t, d, "web-3").PublicKey()
	var ae *api.Error
	if _, err := d.revoke(api.RevokeRequest{Node: "web-1", Key: other}); !errors.As(err, &ae) || ae.Code != api.CodeKeyMismatch || !strings.Contains(ae.Message, "record forgotten") {
		t.Fatalf("revoke --key another key once forgotten: %v, want key_mismatch saying the record was forgotten", err)
	}
	if _, err := d.label(api.LabelRequest{Node: "web-1", Labels: map[string]string{"a": "b"}}); !errors.As(err, &ae) || ae.Code != api.CodeNotFound || !strings.Contains(ae.Message, "web-1: revoked, and the record forgotten since") {
		t.Fatalf("label web-1 once forgotten: %v", err)
	}
	if _, err := d.declare(api.DeclareRequest{Nodes: []string{"web-1"}, Body: []byte(`{"files":[]}`)}, requestCall{}); !errors.As(err, &ae) || ae.Code != api.CodeNotFound || !strings.Contains(ae.Message, "web-1: revoked, and the record forgotten since") {
		t.Fatalf("declare to web-1 alone once forgotten: %v", err)
	}
	// A list naming it with a live node (an inventory an automation declares to)
	// goes on reaching the live one, web-1 skipped, as before it was forgotten
	// (review 28, MED-1).
	if res, err := d.declare(api.DeclareRequest{Nodes: []string{"web-2", "web-1"}, Body: []byte(`{"files":[]}`)}, requestCall{}); err != nil ||
		len(res.Assignments) != 1 || res.Assignments[0].Node != "web-2" || len(res.Skipped) != 1 || res.Skipped[0] != "web-1" {
		t.Fatalf("declare to web-2 and web-1 once web-1 is forgotten: %+v, %v", res, err)
	}

	// What reads the forgotten record is stamped with the rules that forget: a
	// control node put back to an older meshctl since, which ignored the
	// forgotten records of the snapshot it started from, stops at it rather than
	// refuse the revocation or start the id's versions over (review 28, MED-2).
	if cmd, err := d.proposeRevoke(api.RevokeRequest{Nodes: []string{"web-1", "web-3"}}); err != nil || cmd.Rules != state.RulesForgetRevoked {
		t.Fatalf("a revocation naming a forgotten id: rules %d, %v; want %d", cmd.Rules, err, state.RulesForgetRevoked)
	}
	if cmd, err := d.proposeRevoke(api.RevokeRequest{Nodes: []string{"web-3"}}); err != nil || cmd.Rules == state.RulesForgetRevoked {
		t.Fatalf("a revocation naming no forgotten id: rules %d, %v; want it not stamped for it", cmd.Rules, err)
	}
	if r := d.enrolRules(state.RoleWorker, "web-1"); r != state.RulesForgetRevoked {
		t.Fatalf("an enrolment under a forgotten id: rules %d, want %d", r, state.RulesForgetRevoked)
	}
	if r := d.enrolRules(state.RoleWorker, "web-9"); r != 0 {
		t.Fatalf("an enrolment under a new id: rules %d, want 0", r)
	}
}
