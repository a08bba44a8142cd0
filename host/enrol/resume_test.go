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

// TestAnAnswerOfAnotherTimeNamesTheClock: this machine's clock is hours behind the
// mesh's, which signs its answer: the first declaration is not valid yet here. The
// mesh enrolled the key; the run says to set the clocks right and run enrol again
// with the same token, keeps the key for it, and is not told the answer "does not verify", as
// if it were forged, with nothing to do. (The run again once the clock is set is
// TestALostAnswerIsResumedAfterTheTokenExpired's: the same key presented again.)
func TestAnAnswerOfAnotherTimeNamesTheClock(t *testing.T) {
	m := newFakeMeshSigningAt(t, 3*time.Hour, func(*wire.EnrolResponse) {})
	dir := filepath.Join(t.TempDir(), "state")
	_, err := Enrol(context.Background(), Options{StateDir: dir, Token: m.token, DialTimeout: 5 * time.Second, RequestTimeout: 5 * time.Second})
	if !errors.Is(err, ErrAnswerTime) || errors.Is(err, ErrBadAnswer) {
		t.Fatalf("got %v, want ErrAnswerTime", err)
	}
	for _, want := range []string{"once the clocks agree", "timedatectl", "run enrol again with the same token", "enrolled this machine's key"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the failure does not say %q: %v", want, err)
		}
	}
	if _, err := identity.LoadPending(dir); err != nil {
		t.Fatalf("the key the mesh enrolled was not kept for the run again: %v", err)
	}
}
