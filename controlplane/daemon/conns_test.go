package daemon

import (
	"slices"
	"testing"

	"mesh/broker"
	"mesh/controlplane/authn"
)

// TestOwnConnectionsAreWhatTheBrokerReserves: the broker's capacity counts the
// control plane's in-process connections, which hold no descriptor, and those in the
// hosts' accounts, which are no hosts (broker.CapacityFor): the counts must be these.
func TestOwnConnectionsAreWhatTheBrokerReserves(t *testing.T) {
	slots := (&conns{}).slots()
	inHosts := 0
	for _, s := range slots {
		g, ok := authn.InternalGrant(s.role, nil)
		if !ok {
			t.Fatalf("role %s has no grant", s.role)
		}
		if g.Host {
			t.Errorf("role %s is granted as a host", s.role)
		}
		if g.Account == broker.AccountHosts || g.Account == broker.AccountRevoked {
			inHosts++
		}
	}
	if len(slots) != broker.ControlPlaneClients || inHosts != broker.ControlPlaneHostClients {
		t.Fatalf("the control plane opens %d connections, %d in the hosts' accounts; the broker reserves for %d, %d",
			len(slots), inHosts, broker.ControlPlaneClients, broker.ControlPlaneHostClients)
	}
}

// TestOwnConnectionsAreEveryRole: the control plane opens one connection for each
// role authn knows (authn.Roles), which the tests of its grants go through: a role
// opened here and left out there would go untested.
func TestOwnConnectionsAreEveryRole(t *testing.T) {
	var opened []authn.Role
	for _, s := range (&conns{}).slots() {
		opened = append(opened, s.role)
	}
	if !slices.Equal(opened, authn.Roles()) {
		t.Fatalf("the control plane opens %v; authn.Roles() lists %v", opened, authn.Roles())
	}
}
