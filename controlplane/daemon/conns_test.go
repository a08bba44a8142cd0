package daemon

import (
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"mesh/broker"
	"mesh/controlplane/api"
	"mesh/controlplane/authn"
	"mesh/controlplane/state"
	"mesh/integration/freeport"
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
		// Below the cap, not at it: nats-server closes a connection at its cap
		// as it applies the account's limits again, at each reload of the
		// accounts (TestAReloadOfTheAccountsKeepsTheControlPlanesConnections).
		if int(own[0].NumSubs) != subs || subs == 0 || subs >= capacity {
			t.Errorf("the control plane's connection in %s holds %d subscriptions at the broker, made %d; the cap is %d, which it must stay below: %v", a, own[0].NumSubs, subs, capacity, own[0].Subs)
		}
		t.Logf("%s: %d subscriptions of %d", a, own[0].NumSubs, capacity)
	}
}

// TestAReloadOfTheAccountsKeepsTheControlPlanesConnections: nats-server applies an
// account's limits again to its connections at each reload of the accounts (a
// control node admitted, here), and closes one whose subscriptions reach the cap:
// the control plane's connection in the hosts account held 4 of 4 and was closed
// at each admission and removal ("maximum subscriptions exceeded"), its hosts'
// enrolments, syncs and reports in flight lost until nats.go reconnected it.
func TestAReloadOfTheAccountsKeepsTheControlPlanesConnections(t *testing.T) {
	log := &lockedBuffer{}
	d, _ := runDaemon(t, Options{Dir: bootstrapped(t, "reloadsubs"), Logger: slog.New(slog.NewTextHandler(log, nil))})
	waitFor(t, 10*time.Second, "the leader serving", func() bool { return strings.Contains(log.String(), "serving the API") })
	addrs := freeport.Addrs(t, 3)
	for _, c := range []state.Command{
		{Op: state.OpCreateToken, At: d.now().UTC(), CreateToken: &state.CreateTokenCmd{ID: "tok-cp-2", Node: "cp-2", Role: state.RoleControl, TTL: time.Hour,
			Control: &state.ControlAddrs{Broker: addrs[0], Raft: addrs[1], Cluster: addrs[2], Pin: strings.Repeat("ab", 32)},
			Sealed:  []byte("sealed")}},
		{Op: state.OpEnrol, At: d.now().UTC(), Enrol: &state.EnrolCmd{TokenID: "tok-cp-2", Node: "cp-2", Role: state.RoleControl, PublicKey: "UCP2JOIN", CurveKey: "XCP2"}},
	} {
		if res, err := d.raft.Apply(c, time.Minute); err != nil || res.Err != nil {
			t.Fatalf("admit cp-2: %v %v", err, res.Err)
		}
	}
	waitFor(t, 10*time.Second, "the broker reloading its accounts", func() bool { return strings.Contains(log.String(), "Reloaded: accounts") })
	time.Sleep(200 * time.Millisecond) // nats-server closes such a connection 20 ms after it says so
	if strings.Contains(log.String(), "maximum subscriptions exceeded") {
		t.Fatalf("a reload of the accounts found the control plane's connection at the cap:\n%s", log.String())
	}
	for _, nc := range d.conns.all() {
		if st := nc.Stats(); st.Reconnects != 0 || !nc.IsConnected() {
			t.Errorf("%s: %d reconnections, connected %v, after a reload of the accounts", nc.Opts.Name, st.Reconnects, nc.IsConnected())
		}
	}
}

// TestADeeperEnrolmentSubjectIsDropped: the one subscription for both enrolment
// subjects takes any subject under the prefix; one deeper than
// mesh.enrol.<node>.<key>, which the broker lets no client publish, is dropped as
// malformed and counted, not served as the node's and key's it begins with.
func TestADeeperEnrolmentSubjectIsDropped(t *testing.T) {
	d := fleet(t, 0)
	malformed := func() uint64 { return d.guard.snapshot().Dropped[DropKey{Subject: "enrol", Reason: ReasonMalformed}] }
	before := malformed()
	// A request naming the whole rest of the subject as its key, as the key the
	// subject names: read as keyed, it would go on to the reply's check.
	d.handleEnrol(&nats.Msg{Subject: api.EnrolPrefix + "web-1.UKEY.extra", Reply: "_INBOX.x", Data: []byte(`{"v":2,"public_key":"UKEY.extra"}`)})
	if got := malformed(); got != before+1 {
		t.Fatalf("a deeper enrolment subject: %d dropped as malformed, want %d", got, before+1)
	}
}
