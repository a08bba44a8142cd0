package daemon

import (
	"errors"
	"fmt"
	"slices"
	"strings"
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

// TestRotateRunTwice: a rotation run again while the first is in progress is
// refused, and says the rotation it found may be the caller's own, which completed,
// and what comes next; it said "retire the old key first", which read as retire,
// then rotate again: a rotation nobody wanted.
func TestRotateRunTwice(t *testing.T) {
	d := fleet(t, 0)
	first, err := d.rotateKey(api.RotateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.rotateKey(api.RotateRequest{})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeBadRequest || !strings.Contains(ae.Message, fmt.Sprintf("epoch %d", first.Epoch)) ||
		!strings.Contains(ae.Message, "if that rotation is yours, it completed") || !strings.Contains(ae.Message, first.Keys[1][:12]) {
		t.Fatalf("rotate again: %v, want bad_request naming epoch %d, its new key and that it completed", err, first.Epoch)
	}
}

// TestARetirementNamesOnlyTheTokensItMadeStale: each retirement named again the
// pending tokens an earlier one made useless, as "refused from now on" (a docs
// walkthrough); it names those that carried the key it retires.
func TestARetirementNamesOnlyTheTokensItMadeStale(t *testing.T) {
	d := fleet(t, 0)
	mintFor(t, d, "web-1")
	for i, want := range [][]string{{"web-1"}, {"web-2"}} {
		if i == 1 {
			mintFor(t, d, "web-2")
		}
		if _, err := d.rotateKey(api.RotateRequest{}); err != nil {
			t.Fatal(err)
		}
		res, err := d.retireKey(api.RetireRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.StaleTokens, want) {
			t.Errorf("retirement %d: stale tokens %v, want %v", i+1, res.StaleTokens, want)
		}
	}
}
