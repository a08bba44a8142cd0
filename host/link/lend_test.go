package link

import (
	"errors"
	"testing"

	"mesh/host/identity"
)

// TestALateAttemptSignsNothing: once the loan ended (an enrolment or a join has
// its connection), an attempt at another broker that reaches its login signs
// nothing, so sends no login (which would spend one of the token's logins at that
// broker), and never reads the key, which the caller may be wiping.
func TestALateAttemptSignsNothing(t *testing.T) {
	kp, err := identity.NewKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	key := Lend(kp.Sign)
	if sig, err := key.Sign([]byte("nonce")); err != nil || len(sig) == 0 {
		t.Fatalf("while lent: %x, %v; want a signature", sig, err)
	}
	key.End()
	kp.Wipe()
	if sig, err := key.Sign([]byte("nonce")); !errors.Is(err, ErrLoanEnded) || sig != nil {
		t.Fatalf("after the loan ended: %x, %v; want ErrLoanEnded and no signature", sig, err)
	}
}
