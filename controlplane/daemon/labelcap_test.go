package daemon

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
)

// TestANodesLabelsAreCapped: at most api.MaxLabels labels went in one request, but
// each request's were merged into the node's, so a label stamped at every deploy
// grew the node's record, every snapshot and every backup for good (a review: 2,000
// one-label requests accepted). A change that would take the node past the cap is
// refused, nothing changed; one that changes values, or removes, goes through, also
// for a node already past it (labelled before this version).
func TestANodesLabelsAreCapped(t *testing.T) {
	d := fleet(t, 2)
	labels := func(n, from int) map[string]string {
		m := map[string]string{}
		for i := range n {
			m[fmt.Sprintf("k%d", from+i)] = "v"
		}
		return m
	}
	ok := func(node string, l map[string]string) {
		t.Helper()
		if _, err := d.label(api.LabelRequest{Node: node, Labels: l}); err != nil {
			t.Fatalf("label %s %v: %v", node, l, err)
		}
	}
	refused := func(node string, l map[string]string) {
		t.Helper()
		var ae *api.Error
		if _, err := d.label(api.LabelRequest{Node: node, Labels: l}); !errors.As(err, &ae) || ae.Code != api.CodeBadRequest {
			t.Fatalf("label %s %v: %v, want refused bad_request", node, l, err)
		}
	}
	ok("n-0", labels(api.MaxLabels, 0))
	refused("n-0", labels(1, api.MaxLabels))
	ok("n-0", map[string]string{"k0": "changed"})
	ok("n-0", map[string]string{"k0": "", "new": "v"}) // one out, one in
	if got := len(d.fsmNode(t, "n-0").Labels); got != api.MaxLabels {
		t.Fatalf("n-0 carries %d labels, want %d", got, api.MaxLabels)
	}
	// Labelled past the cap before this version: a removal goes through, an
	// addition does not.
	for from := 0; from < api.MaxLabels+16; from += api.MaxLabels {
		if res, err := d.raft.Apply(state.Command{Op: state.OpLabel, Label: &state.LabelCmd{Node: "n-1", Labels: labels(min(api.MaxLabels, api.MaxLabels+16-from), from)}}, time.Minute); err != nil || res.Err != nil {
			t.Fatal(err, res.Err)
		}
	}
	ok("n-1", map[string]string{"k0": ""})
	refused("n-1", labels(1, 1000))
}
