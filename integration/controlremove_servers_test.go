package integration

import (
	"strings"
	"testing"

	"mesh/integration/harness"
)

// TestControlRemoveThroughServersListingTheRemovedBrokerFirst: from --servers (or
// MESH_SERVERS, or a context) naming the removed node's broker first, the removal
// goes in through another broker and its answer comes back (without dialling it
// last: exit 3, "the connection to the control plane was lost ... look").
func TestControlRemoveThroughServersListingTheRemovedBrokerFirst(t *testing.T) {
	t.Parallel()
	cp1 := harness.NewControlPlane(t, bin, "rmsrv")
	cp1.Serve()
	cp2 := joinControl(t, cp1, "cp-2")
	cp3 := joinControl(t, cp1, "cp-3")
	r := cp1.Ctl("control", "remove", "cp-3", "--servers", cp3.Listen+","+cp1.Listen+","+cp2.Listen)
	if r.Code != 0 || !strings.Contains(r.Stdout, "removed control node cp-3") {
		t.Fatalf("control remove cp-3 with its broker first in --servers: exit %d\n%s", r.Code, r.Combined())
	}
}
