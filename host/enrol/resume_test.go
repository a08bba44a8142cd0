package enrol

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/host/identity"
	"mesh/host/wire"
)

// TestALostAnswerIsResumedAfterTheTokenExpired: the first run's answer is lost (the
// mesh committed the enrolment), and the machine runs enrol again with the same
// token after it expired (a disk freed, a network back, late): the pending key of the
// first run is presented again, and the mesh's answer to that repeat finishes the
// enrolment. Before, the run was refused here as expired (or, within the clock's
// tolerance, by the mesh as used) and told to ask for a new token, which the mesh
// refused while the node id was enrolled, with this machine's key. A state directory
// that holds no key of this token's enrolment is refused the expired token as before.
func TestALostAnswerIsResumedAfterTheTokenExpired(t *testing.T) {
	answers := 0
	m := newFakeMesh(t, func(r *wire.EnrolResponse) {
		answers++
		if answers == 1 {
			*r = wire.EnrolResponse{} // lost
		}
	})
	dir := filepath.Join(t.TempDir(), "state")
	o := Options{StateDir: dir, Token: m.token, DialTimeout: 5 * time.Second, RequestTimeout: time.Second}
	if _, err := Enrol(context.Background(), o); err == nil {
		t.Fatal("the first run succeeded without an answer")
	}
	first, err := identity.LoadPending(dir)
	if err != nil {
		t.Fatalf("the first run kept no pending key: %v", err)
	}

	// 40 minutes on: the token expired 10 minutes ago, past the clock's tolerance.
	later := func() time.Time { return time.Now().Add(40 * time.Minute) }
	if _, err := ParseToken(m.token, later(), filepath.Join(t.TempDir(), "elsewhere")); !errors.Is(err, ErrToken) {
		t.Fatalf("an expired token without an enrolment begun is not refused offline: %v", err)
	}
	// A day and more after the expiry the mesh no longer keeps the token: refused
	// offline, though the key of its enrolment is here.
	if _, err := ParseToken(m.token, time.Now().Add(30*time.Minute+ResumeWindow+time.Minute), dir); !errors.Is(err, ErrToken) {
		t.Fatalf("a token expired over a day ago is not refused offline: %v", err)
	}
	var out strings.Builder
	o.Now, o.Out, o.RequestTimeout = later, &out, 5*time.Second
	res, err := Enrol(context.Background(), o)
	if err != nil {
		t.Fatalf("the run again after expiry: %v\n%s", err, out.String())
	}
	kp, _ := first.KeyPair()
	pub, _ := kp.PublicKey()
	if res.Identity.PublicKey != pub || answers != 2 {
		t.Fatalf("enrolled with key %s (the first run's: %s), after %d requests", res.Identity.PublicKey, pub, answers)
	}
	if !strings.Contains(out.String(), "expired, but an earlier run of this enrolment began here") {
		t.Errorf("the run does not say why an expired token was used:\n%s", out.String())
	}
	if _, err := identity.LoadPending(dir); !errors.Is(err, identity.ErrNoPending) {
		t.Errorf("the pending key outlived the enrolment: %v", err)
	}
}
