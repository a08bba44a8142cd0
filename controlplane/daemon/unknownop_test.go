package daemon

import (
	"errors"
	"strings"
	"testing"

	"mesh/controlplane/api"
	"mesh/controlplane/operator"
)

// TestAnUnknownOperationSaysTheControlNodeIsOlder: a meshctl newer than the control
// node asks for an operation it does not know; the answer is not_found, as every
// version said, naming the operation and what the node runs and what to do, where
// it said only "unknown operation X" (a review).
func TestAnUnknownOperationSaysTheControlNodeIsOlder(t *testing.T) {
	d := fleet(t, 0)
	d.opts.Version = "0.1.0"
	c := operator.NewClient(servedToOperators(t, d), 0)
	var ae *api.Error
	err := c.Call("node.teleport", struct{}{}, &struct{}{})
	if !errors.As(err, &ae) || ae.Code != api.CodeNotFound {
		t.Fatalf("an unknown operation: %v, want %s", err, api.CodeNotFound)
	}
	for _, says := range []string{`unknown operation "node.teleport"`, "runs meshctl 0.1.0", "upgrade the control nodes"} {
		if !strings.Contains(ae.Message, says) {
			t.Errorf("the answer does not say %q: %s", says, ae.Message)
		}
	}
}
