package join

import (
	"errors"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/datadir"
	"mesh/integration/freeport"
)

// TestARouteThatFailsIsNotRolledBack: a join whose NATS route did not come up after
// the mesh confirmed it said "the join could not be confirmed and was rolled back"
// (ErrNotConfirmed), although the node stays a confirmed nonvoter: an operator who
// believed it and wiped the directory left a member behind. It is now ErrNoRoute,
// which says the node is a member, that the same join finishes it once the cluster
// port is open, and how to give up on it.
func TestARouteThatFailsIsNotRolledBack(t *testing.T) {
	d := joinerDir(t)
	// This node's broker and cluster addresses, and another control node's
	// cluster address where nothing listens: free a moment ago.
	addrs := freeport.Addrs(t, 3)
	r := &run{o: Options{Dir: d, Out: &strings.Builder{}, RouteTimeout: 300 * time.Millisecond}}
	cfg := datadir.Config{Mesh: "m", Node: "cp-2", Listen: addrs[0], ClusterListen: addrs[1]}
	err := r.route(t.Context(), cfg, &api.ControlAdmission{Members: []api.ControlMember{{ID: "cp-1", Cluster: addrs[2]}}}, func() bool { return false })
	if !errors.Is(err, ErrNoRoute) || errors.Is(err, ErrNotConfirmed) {
		t.Fatalf("want ErrNoRoute and not ErrNotConfirmed, got %v", err)
	}
	for _, says := range []string{"confirmed member", "run the same meshctl join --data " + string(d) + " again", "meshctl control remove cp-2", addrs[2]} {
		if !strings.Contains(err.Error(), says) {
			t.Errorf("the error does not say %q: %v", says, err)
		}
	}
	if strings.Contains(err.Error(), ErrNotConfirmed.Error()) || !strings.Contains(err.Error(), "nothing was rolled back") {
		t.Errorf("the error says the join was rolled back: %v", err)
	}
}
