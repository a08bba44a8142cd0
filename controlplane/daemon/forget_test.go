package daemon

import (
	"context"
	"errors"
	"log/slog"
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
	d, err := Open(context.Background(), Options{Dir: bootstrapped(t, "forget"), Logger: slog.New(slog.NewTextHandler(log, nil)),
		Timeouts: testTimeouts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
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
	if !kept() {
		t.Fatal("forgotten while cp-2 applies older rules, which would keep it")
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
	if _, err := d.label(api.LabelRequest{Node: "web-1", Labels: map[string]string{"a": "b"}}); !errors.As(err, &ae) || ae.Code != api.CodeNotFound || !strings.Contains(ae.Message, "web-1: revoked, and its record forgotten") {
		t.Fatalf("label web-1 once forgotten: %v", err)
	}
	if _, err := d.declare(api.DeclareRequest{Nodes: []string{"web-1"}, Body: []byte(`{"files":[]}`)}, requestCall{}); !errors.As(err, &ae) || ae.Code != api.CodeNotFound || !strings.Contains(ae.Message, "web-1: revoked, and its record forgotten") {
		t.Fatalf("declare to web-1 once forgotten: %v", err)
	}
}
