package daemon

import (
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
)

// TestARevocationRunAgainSaysWhichMachineItRevoked (audit of commands run twice,
// interrupted and concurrent, finding 6): `meshctl revoke web-3` run again after a
// new machine enrolled as web-3 (a script retried, a second operator repeating the
// first's) revoked the new machine, and its answer could not be told from the first
// revocation's: no key, no enrolment time, although the state knows the id was
// revoked before. The answer now names the key revoked and when it enrolled, and how
// many times, and when last, the id was revoked before under other keys. With the
// key it means (revoke --key), a revocation of another machine is refused,
// key_mismatch, and revokes nothing.
func TestARevocationRunAgainSaysWhichMachineItRevoked(t *testing.T) {
	d := fleet(t, 0)
	enrol := enrolWeb3(t, d)
	first := enrol(0)
	res, err := d.revoke(api.RevokeRequest{Node: "web-3", Key: first})
	if err != nil || len(res.Revoked) != 1 {
		t.Fatalf("revoke web-3 --key its key: %+v, %v", res, err)
	}
	r := res.Revoked[0]
	if r.PublicKey != first || r.EnrolledAt.IsZero() || r.EarlierRevocations != 0 || !r.EarlierRevokedAt.IsZero() || !r.AlreadyRevokedAt.IsZero() {
		t.Fatalf("the first revocation: %+v; want key %s, its enrolment, and no earlier revocation", r, first)
	}
	var firstAt time.Time
	d.fsm.Read(func(s *state.State) { firstAt = s.Nodes["web-3"].RevokedAt })

	// A new machine enrols as web-3; the same revocation is run again.
	time.Sleep(10 * time.Millisecond)
	second := enrol(1)
	var ae *api.Error
	if _, err := d.revoke(api.RevokeRequest{Node: "web-3", Key: first}); !errors.As(err, &ae) || ae.Code != api.CodeKeyMismatch ||
		!strings.Contains(ae.Message, "web-3 holds key "+second) || !strings.Contains(ae.Message, "is revoked already") ||
		!strings.Contains(ae.Message, "meshctl revoke --key "+second+" web-3") {
		t.Fatalf("revoke web-3 --key %s after %s enrolled: %v; want key_mismatch naming both", first, second, err)
	}
	d.fsm.Read(func(s *state.State) {
		if n := s.Nodes["web-3"]; n.Revoked || n.PublicKey != second {
			t.Fatalf("a refused revocation revoked web-3's new machine: %+v", n)
		}
	})
	// Without --key: the new machine is revoked, and the answer says the id was
	// revoked before, and when.
	res, err = d.revoke(api.RevokeRequest{Nodes: []string{"web-3"}})
	if err != nil || len(res.Revoked) != 1 {
		t.Fatalf("revoke web-3 run again: %+v, %v", res, err)
	}
	r = res.Revoked[0]
	if r.PublicKey != second || r.EarlierRevocations != 1 || !r.EarlierRevokedAt.Equal(firstAt.UTC()) || !r.AlreadyRevokedAt.IsZero() {
		t.Fatalf("the revocation run again: %+v; want key %s, one earlier revocation at %s", r, second, firstAt)
	}
	// Bad uses of key: refused before anything.
	for _, req := range []api.RevokeRequest{{Nodes: []string{"web-3", "web-4"}, Key: second}, {Node: "web-3", Key: "not-a-key"}} {
		if _, err := d.revoke(req); !errors.As(err, &ae) || ae.Code != api.CodeBadRequest {
			t.Fatalf("%+v: %v, want bad_request", req, err)
		}
	}
}

// enrolWeb3 returns a function that enrols a new machine as web-3 (the n-th: its
// token's id), and returns its key.
func enrolWeb3(t *testing.T, d *Daemon) func(n int) string {
	return func(n int) string {
		t.Helper()
		kp, _ := nkeys.CreateUser()
		pub, _ := kp.PublicKey()
		id := hex.EncodeToString([]byte(strings.Repeat(string(rune('a'+n)), 32)))
		for _, c := range []state.Command{
			{Op: state.OpCreateToken, At: d.now().UTC(), CreateToken: &state.CreateTokenCmd{ID: id, Node: "web-3", Role: state.RoleWorker, TTL: time.Hour}},
			{Op: state.OpEnrol, At: d.now().UTC(), Enrol: &state.EnrolCmd{TokenID: id, Node: "web-3", Role: state.RoleWorker, PublicKey: pub}},
		} {
			if res, err := d.raft.Apply(c, time.Minute); err != nil || res.Err != nil {
				t.Fatalf("enrol web-3's machine %d: %v %v", n, err, res.Err)
			}
		}
		return pub
	}
}

// TestARevocationByKeyRacingAnEnrolment: the leader checks revoke --key against
// its state, then commits; a new machine enrolling under the revoked id in between
// was revoked in the key's place. Where every member applies RulesRevokeByKey the
// command names the key and the state machine checks it again as it applies: the
// answer is key_mismatch, as the check before the commit gives, and the new machine
// stays. While a member applies older rules the command goes as before, unstamped.
func TestARevocationByKeyRacingAnEnrolment(t *testing.T) {
	d := fleet(t, 0)
	enrol := enrolWeb3(t, d)
	first := enrol(0)
	if _, err := d.revoke(api.RevokeRequest{Node: "web-3", Key: first}); err != nil {
		t.Fatalf("revoke web-3: %v", err)
	}
	// Run again: checked against the state, web-3 still holds first (revoked).
	cmd, err := d.proposeRevoke(api.RevokeRequest{Node: "web-3", Key: first})
	if err != nil {
		t.Fatalf("revoke web-3 --key %s again, proposed: %v", first, err)
	}
	if cmd.Rules != state.RulesRevokeByKey || cmd.Revoke.Keys["web-3"] != first {
		t.Fatalf("proposed %+v, rules %d: want web-3's key named, stamped %d", cmd.Revoke, cmd.Rules, state.RulesRevokeByKey)
	}
	second := enrol(1)
	var ae *api.Error
	if _, err := d.commitRevoke(cmd, first); !errors.As(err, &ae) || ae.Code != api.CodeKeyMismatch ||
		!strings.Contains(ae.Message, "web-3 holds key "+second) || !strings.Contains(ae.Message, "meshctl revoke --key "+second+" web-3") {
		t.Fatalf("committed after %s enrolled: %v; want key_mismatch naming it", second, err)
	}
	d.fsm.Read(func(s *state.State) {
		if n := s.Nodes["web-3"]; n.Revoked || n.PublicKey != second {
			t.Fatalf("the new machine was revoked in the key's place: %+v", n)
		}
	})

	// A member on the rules before, on a mesh whose state no revocation by key
	// built yet (on this one it would have stopped at the first): the key is
	// checked before the commit only.
	d = fleet(t, 0)
	second = enrolWeb3(t, d)(0)
	d.ctl.beat(api.ControlHeartbeat{V: api.ProtocolVersion, Node: "cp-2", Raft: api.RaftVoter, Rules: state.RulesRevokeByKey - 1}, d.now(), 0)
	cmd, err = d.proposeRevoke(api.RevokeRequest{Node: "web-3", Key: second})
	if err != nil || cmd.Revoke.Keys != nil || cmd.Rules >= state.RulesRevokeByKey {
		t.Fatalf("with an older member: %+v, rules %d, %v; want no keys, older rules", cmd.Revoke, cmd.Rules, err)
	}
}
