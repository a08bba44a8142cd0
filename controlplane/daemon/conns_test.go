package daemon

import (
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

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

// TestOwnSubscriptionsFitTheHostsCap: the control plane's connections in the hosts'
// accounts hold subscriptions under the same cap as every host connection there
// (broker.DefaultHostSubscriptions, kept as small as the hosts' clients allow): once
// the leader serves, each holds all of its own, none refused. One refused would be
// a subject the leader silently no longer hears (a refusal is only an asynchronous
// error), all hosts' enrolments or reports with it.
func TestOwnSubscriptionsFitTheHostsCap(t *testing.T) {
	d := fleet(t, 0)
	if err := d.serveAPI(); err != nil {
		t.Fatal(err)
	}
	capacity := int(d.broker.HostLimits().MaxSubscriptions)
	for _, a := range []broker.Account{broker.AccountHosts, broker.AccountRevoked} {
		connz, err := d.broker.InProcess().Connz(&server.ConnzOptions{Account: d.broker.AccountName(a), Subscriptions: true})
		if err != nil {
			t.Fatal(err)
		}
		var own []*server.ConnInfo
		for _, c := range connz.Conns {
			if strings.HasPrefix(c.Name, "control-plane:") {
				own = append(own, c)
			}
		}
		if len(own) != 1 {
			t.Fatalf("%d connections of the control plane in %s, want 1", len(own), a)
		}
		nc := map[broker.Account]*nats.Conn{broker.AccountHosts: d.conns.hosts, broker.AccountRevoked: d.conns.revoked}[a]
		subs := nc.NumSubscriptions() // as the client made them, refused or not
		if int(own[0].NumSubs) != subs || subs == 0 || subs > capacity {
			t.Errorf("the control plane's connection in %s holds %d subscriptions at the broker, made %d; the cap is %d: %v", a, own[0].NumSubs, subs, capacity, own[0].Subs)
		}
		t.Logf("%s: %d subscriptions of %d", a, own[0].NumSubs, capacity)
	}
}
