package enrol

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"mesh/host/identity"
	"mesh/host/wire"
)

// TestAnUnansweredEnrolmentIsSentAgain: a request a control node took and never
// answered (it stopped leading as it came, or was cut off while its broker still
// counted its subscription) failed the enrolment after the whole timeout (seen in
// TestMinorityPartition). Unanswered for Options.Resend, it is sent again, and the
// control node serving answers it.
func TestAnUnansweredEnrolmentIsSentAgain(t *testing.T) {
	var answers atomic.Int32
	m := newFakeMesh(t, func(r *wire.EnrolResponse) {
		if answers.Add(1) == 1 {
			*r = wire.EnrolResponse{} // taken, never answered
		}
	})
	dir := filepath.Join(t.TempDir(), "state")
	var out strings.Builder
	if _, err := Enrol(context.Background(), Options{StateDir: dir, Token: m.token, Out: &out, DialTimeout: 5 * time.Second,
		RequestTimeout: 5 * time.Second, Resend: 200 * time.Millisecond}); err != nil {
		t.Fatalf("enrol: %v\n%s", err, out.String())
	}
	if answers.Load() < 2 {
		t.Fatalf("the mesh received %d sendings, want it sent again", answers.Load())
	}
}

// TestARefusalAfterAnUnansweredSendingKeepsTheKey: the first sending went
// unanswered, and the second was refused token_expired: the first may have been
// committed within the token's hour by a leader whose successor had not applied it
// as the second came. The key is kept and the refusal says to run enrol again with
// the same token (answered from the mesh's records for a day after the token
// expired), not to ask for a new token, which would leave the enrolled node beside
// a new one refused as node_exists.
func TestARefusalAfterAnUnansweredSendingKeepsTheKey(t *testing.T) {
	var answers atomic.Int32
	m := newFakeMesh(t, func(r *wire.EnrolResponse) {
		if answers.Add(1) == 1 {
			*r = wire.EnrolResponse{}
			return
		}
		refuse(wire.CodeTokenExpired)(r)
	})
	dir := filepath.Join(t.TempDir(), "state")
	start := time.Now()
	_, err := Enrol(context.Background(), Options{StateDir: dir, Token: m.token, DialTimeout: 5 * time.Second,
		RequestTimeout: 2 * time.Second, Resend: 200 * time.Millisecond})
	var re *RefusedError
	if !errors.As(err, &re) || re.Code != wire.CodeTokenExpired || !re.EarlierUnanswered || !re.Retryable() {
		t.Fatalf("got %v, want token_expired said not to be final", err)
	}
	if !strings.Contains(err.Error(), "run enrol again with the same token") || strings.Contains(err.Error(), "ask the operator for a new token;") {
		t.Fatalf("the refusal does not say to run again with the same token: %v", err)
	}
	if took := time.Since(start); took < 1800*time.Millisecond {
		t.Fatalf("the refusal was taken after %s, while the first sending could still answer (timeout 2 s)", took)
	}
	if _, perr := identity.LoadPending(dir); perr != nil {
		t.Fatalf("the key the first sending may have enrolled was dropped: %v", perr)
	}
	if n := answers.Load(); n < 2 {
		t.Fatalf("%d sendings, want it sent again", n)
	}
}

// TestAFinalRefusalAfterAnUnansweredSendingIsFinal: one no earlier sending can
// overtake (the token cancelled) is taken at once, and drops the key.
func TestAFinalRefusalAfterAnUnansweredSendingIsFinal(t *testing.T) {
	var answers atomic.Int32
	m := newFakeMesh(t, func(r *wire.EnrolResponse) {
		if answers.Add(1) == 1 {
			*r = wire.EnrolResponse{}
			return
		}
		refuse(wire.CodeTokenCancelled)(r)
	})
	dir := filepath.Join(t.TempDir(), "state")
	start := time.Now()
	_, err := Enrol(context.Background(), Options{StateDir: dir, Token: m.token, DialTimeout: 5 * time.Second,
		RequestTimeout: 5 * time.Second, Resend: 200 * time.Millisecond})
	var re *RefusedError
	if !errors.As(err, &re) || re.Code != wire.CodeTokenCancelled || re.EarlierUnanswered || re.Retryable() {
		t.Fatalf("got %v, want token_cancelled, final", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("took %s, want the refusal at once", took)
	}
	if _, perr := identity.LoadPending(dir); !errors.Is(perr, identity.ErrNoPending) {
		t.Fatalf("the key of a cancelled token is still pending: %v", perr)
	}
}

// TestRefusalSaysItsAdviceOnce: the mesh's message speaks to an operator ("mint a
// new token"), the agent's advice to the person at the machine; the refusal says
// the latter once.
func TestRefusalSaysItsAdviceOnce(t *testing.T) {
	for _, c := range []struct{ code, message, want string }{
		{wire.CodeTokenUsed, "this token already enrolled a node; mint a new token",
			"this token already enrolled a node; ask the operator for a new one"},
		{wire.CodeTokenStaleKey, "the token names a signing key the mesh no longer holds (rotated): mint a new token",
			"the token names a signing key the mesh no longer holds (rotated); ask the operator for a new one"},
		{wire.CodeTokenCancelled, "this token was cancelled by an operator; ask for a new one",
			"(token_cancelled): this token was cancelled by an operator; ask the operator for a new one"},
		{"some_new_code", "something; mint a new token", "something; mint a new token"},
		// What the mesh adds after its advice is kept (a CLI audit saw the advice twice).
		{wire.CodeTokenExpired, "this token has expired; mint a new token (it expired 1s ago)",
			"(token_expired): this token has expired (it expired 1s ago); ask the operator for a new token"},
		{wire.CodeInternal, "sign the declaration: disk full", "(internal): sign the declaration: disk full; run enrol again with the same token"},
	} {
		got := (&RefusedError{Code: c.code, Message: c.message}).Error()
		// What happened is said once too: the mesh's words, not the advice again
		// ("cancelled by an operator; the operator cancelled this token").
		if !strings.Contains(got, c.want) || strings.Count(got, "new token")+strings.Count(got, "new one") > 1 ||
			strings.Count(got, "cancelled by an operator")+strings.Count(got, "cancelled this token") > 1 || strings.Count(got, "rotated") > 1 {
			t.Errorf("%s: %q, want it to contain %q and its advice once", c.code, got, c.want)
		}
	}
}
