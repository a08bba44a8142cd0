package operatorcreds

import (
	"fmt"
	"testing"

	"mesh/controlplane/api"
	"mesh/controlplane/operator"
)

// TestMayBeRecorded: an operator.add that failed is said to be perhaps recorded
// (its key named, and how to revoke it) for every outcome in which the control
// plane may have committed it, not only a lost answer (a review), and not for a
// refusal, which records nothing.
func TestMayBeRecorded(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("call: %w", operator.ErrNoAnswer), true},
		{fmt.Errorf("call: %w", operator.ErrConnectionLost), true},
		{&api.Error{Code: api.CodeInternal, Message: "the change was carried out, but its answer could not be written"}, true},
		{&api.Error{Code: api.CodeUnavailable, Message: "control node cp-1 took the change up but could not commit it (x): it may still be carried out: look"}, true},
		{&api.Error{Code: api.CodeUnavailable, Message: "leadership changed during the request; run it again"}, true},
		{&api.Error{Code: api.CodeUnavailable, Message: "nothing can be committed now, and nothing was"}, false},
		{&api.Error{Code: api.CodeOperatorExists, Message: "valid credentials"}, false},
		{&api.Error{Code: api.CodeBadRequest, Message: "no"}, false},
		{fmt.Errorf("dial: %w", operator.ErrNoLeader), false},
	} {
		if got := mayBeRecorded(c.err); got != c.want {
			t.Errorf("%v: may be recorded %t, want %t", c.err, got, c.want)
		}
	}
}
