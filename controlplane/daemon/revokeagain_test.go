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
	enrol := func(n int) string {
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
