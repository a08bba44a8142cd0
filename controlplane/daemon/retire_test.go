package daemon

import (
	"errors"
	"testing"

	"mesh/controlplane/api"
)

// TestRetireRunTwice: a retirement run again (or two at once, the second after the
// first) finds the old key gone and says the keyring as it is, done, as a
// revocation run twice does; it said "nothing to retire (rotate first)", exit 4. A
// keyring never rotated still has nothing to retire.
func TestRetireRunTwice(t *testing.T) {
	d := fleet(t, 0)
	var ae *api.Error
	if _, err := d.retireKey(api.RetireRequest{}); !errors.As(err, &ae) || ae.Code != api.CodeBadRequest {
		t.Fatalf("retire with the first keyring: %v, want bad_request (rotate first)", err)
	}
	if _, err := d.rotateKey(api.RotateRequest{}); err != nil {
		t.Fatal(err)
	}
	first, err := d.retireKey(api.RetireRequest{})
	if err != nil || len(first.Keys) != 1 {
		t.Fatalf("retire: %+v, %v", first, err)
	}
	again, err := d.retireKey(api.RetireRequest{})
	if err != nil || again.Epoch != first.Epoch || len(again.Keys) != 1 || again.Keys[0] != first.Keys[0] {
		t.Fatalf("retire again: %+v, %v; want the keyring of the first, epoch %d", again, err, first.Epoch)
	}
}
