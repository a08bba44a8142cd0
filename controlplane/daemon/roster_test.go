package daemon

import (
	"slices"
	"testing"

	"mesh/controlplane/api"
	"mesh/controlplane/operator"
)

// TestRosterPages: a fleet's roster does not fit in one message; the control plane
// answers in pages and the operator client follows them, through the real broker.
func TestRosterPages(t *testing.T) {
	const n = 3000
	d := fleet(t, n)
	nc := servedToOperators(t, d)
	c := operator.NewClient(nc, 0)
	all, err := c.Nodes(api.NodesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Nodes) != n || all.Next != "" {
		t.Fatalf("%d nodes, next %q; want %d and no next page", len(all.Nodes), all.Next, n)
	}
	ids := make([]string, len(all.Nodes))
	for i, v := range all.Nodes {
		ids[i] = v.ID
	}
	if !slices.IsSorted(ids) || len(slices.Compact(slices.Clone(ids))) != n {
		t.Fatal("the pages are not one sorted roster without repeats")
	}
	page, err := d.nodes(api.NodesRequest{Limit: 100})
	if err != nil || len(page.Nodes) != 100 || page.Next != page.Nodes[99].ID {
		t.Fatalf("first page: %d nodes, next %q, %v", len(page.Nodes), page.Next, err)
	}
	some := []string{ids[5], ids[2999], "ghost"}
	sel, err := c.Nodes(api.NodesRequest{Nodes: some})
	if err != nil || len(sel.Nodes) != 2 {
		t.Fatalf("selected %d nodes (%v), want 2", len(sel.Nodes), err)
	}
}
