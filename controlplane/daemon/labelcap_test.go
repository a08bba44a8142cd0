package daemon

import (
	"errors"
	"fmt"
	"sync"
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

// TestLabelChangesFromManyOperatorsAtOnceStayWithinTheCap: each change looked at
// alone is within the cap, and the leader looks at each before any commits; the
// state machine checks the cap again as each commits (RulesLabelCap), so a node
// never carries more than api.MaxLabels, and each refused change changed nothing.
func TestLabelChangesFromManyOperatorsAtOnceStayWithinTheCap(t *testing.T) {
	d := fleet(t, 1)
	start := map[string]string{}
	for i := range api.MaxLabels - 4 {
		start[fmt.Sprintf("k%d", i)] = "v"
	}
	if _, err := d.label(api.LabelRequest{Node: "n-0", Labels: start}); err != nil {
		t.Fatal(err)
	}
	const operators = 32
	var wg sync.WaitGroup
	var mu sync.Mutex
	var added []string
	for i := range operators {
		wg.Go(func() {
			key := fmt.Sprintf("op%d", i)
			_, err := d.label(api.LabelRequest{Node: "n-0", Labels: map[string]string{key: "v"}})
			var ae *api.Error
			switch {
			case err == nil:
				mu.Lock()
				added = append(added, key)
				mu.Unlock()
			case !errors.As(err, &ae) || ae.Code != api.CodeBadRequest:
				t.Errorf("label n-0 %s=v: %v, want it done or refused bad_request", key, err)
			}
		})
	}
	wg.Wait()
	got := d.fsmNode(t, "n-0").Labels
	if len(got) > api.MaxLabels || len(got) != len(start)+len(added) {
		t.Fatalf("n-0 carries %d labels after %d changes went through from %d, want at most %d and %d", len(got), len(added), len(start), api.MaxLabels, len(start)+len(added))
	}
	for _, k := range added {
		if _, ok := got[k]; !ok {
			t.Fatalf("%s was answered done and n-0 does not carry it", k)
		}
	}
}
