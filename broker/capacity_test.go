package broker_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/broker"
)

func TestCapacityFor(t *testing.T) {
	for _, tc := range []struct {
		name                string
		openFiles           uint64
		maxHosts            int
		wantConns, wantHost int
	}{
		{"systemd unit's limit", 65536, 0, 65536 - 128 + 6, 65536 - 128 - 32},
		{"a common hard limit", 4096, 0, 4096 - 128 + 6, 4096 - 128 - 32},
		{"a small limit keeps half for the process", 48, 0, 24 + 6, 24 - 12},
		{"one descriptor", 1, 0, 1 + 6, 1},
		{"--max-hosts below the limit", 65536, 1000, 65536 - 128 + 6, 1000},
		{"--max-hosts above the limit is the limit", 4096, 100000, 4096 - 128 + 6, 4096 - 128 - 32},
		{"unknown limit: nats-server's default, no cap", 0, 0, 0, 0},
		{"unknown limit with --max-hosts", 0, 500, 0, 500},
		{"a limit too large for an int", 1 << 62, 0, 1<<30 - 128 + 6, 1<<30 - 128 - 32},
	} {
		c := broker.CapacityFor(tc.openFiles, tc.maxHosts)
		if c.MaxConnections != tc.wantConns || c.MaxHosts != tc.wantHost || c.OpenFiles != tc.openFiles {
			t.Errorf("%s: CapacityFor(%d, %d) = %+v, want %d connections, %d hosts", tc.name, tc.openFiles, tc.maxHosts, c, tc.wantConns, tc.wantHost)
		}
		if c.MaxConnections > 0 && (c.MaxHosts > c.MaxConnections || uint64(c.MaxConnections-6) > tc.openFiles) {
			t.Errorf("%s: %+v holds more than it may", tc.name, c)
		}
	}
	if c := broker.ProcessCapacity(0); c.OpenFiles == 0 || c.MaxHosts <= 0 {
		t.Errorf("ProcessCapacity(0) = %+v: this process's open-file limit was not read", c)
	}
}

// TestAFullBrokerRefusesHostsOnly: a broker holding as many hosts as its capacity
// allows refuses the next host (ErrFull, counted and logged as such) and admits an
// operator; once a host leaves, another is admitted; a reload while full closes none of
// the hosts admitted.
func TestAFullBrokerRefusesHostsOnly(t *testing.T) {
	m := newMesh(t)
	a, b := controlNodeOf(t, m.ca, "cp-a", m.leaf), newControlNode(t, m.ca, "cp-b")
	var mu sync.Mutex
	auth := &fakeAuth{decide: func(c broker.Client) (broker.Grant, error) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case strings.HasPrefix(c.Token, "host"):
			g := everything(c.Token, broker.AccountHosts)
			g.Host = true
			return g, nil
		case strings.HasPrefix(c.Token, "revoked"):
			g := everything(c.Token, broker.AccountRevoked)
			g.Host = true
			return g, nil
		case strings.HasPrefix(c.Token, "operator"):
			return everything(c.Token, broker.AccountOperators), nil
		case c.Token == "own-hosts":
			return everything(c.Token, broker.AccountHosts), nil
		case c.Token == "own-revoked":
			return everything(c.Token, broker.AccountRevoked), nil
		}
		return broker.Grant{}, broker.ErrRefused
	}}
	// Clustered, so that SetClusterPeers reloads it.
	full, fullLogs := startWith(t, m, auth, func(c *broker.Config) {
		c.Name = a.name
		c.Cluster = &broker.ClusterConfig{Listen: freePorts(t, 1)[0], TLS: a.tls, Pins: []string{a.pin}}
		c.Capacity = broker.Capacity{MaxConnections: 10, MaxHosts: 2}
	})
	if got := full.Capacity().MaxHosts; got != 2 {
		t.Fatalf("Capacity().MaxHosts = %d", got)
	}
	// The control plane's own connections in the hosts' accounts, which are no
	// hosts.
	mustDial(t, full, m.ca.Pin(), nats.Token("own-hosts"))
	mustDial(t, full, m.ca.Pin(), nats.Token("own-revoked"))
	h1 := mustDial(t, full, m.ca.Pin(), nats.Token("host-1"))
	mustDial(t, full, m.ca.Pin(), nats.Token("revoked-1"))
	if _, err := dial(t, full, m.ca.Pin(), nats.Token("host-2")); err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("a third host on a broker for two: err = %v, want an authorization violation", err)
	}
	if _, err := dial(t, full, m.ca.Pin(), nats.Token("revoked-2")); err == nil {
		t.Fatal("a revoked key's connection is a host's: admitted beyond the capacity")
	}
	op := mustDial(t, full, m.ca.Pin(), nats.Token("operator-1"))
	op.expectNoError(t)
	if n := full.EventCounts().Refused[broker.ErrFull.Code]; n != 2 {
		t.Errorf("refusals counted as full: %d, want 2 (%v)", n, full.EventCounts().Refused)
	}
	waitFor(t, func() bool { return strings.Contains(fullLogs.String(), "holds as many host connections") })
	if !errors.Is(broker.ErrFull, broker.ErrRefused) {
		t.Error("ErrFull is not a refusal")
	}

	// A reload asks about every connection again: the full broker closes none.
	if err := full.SetClusterPeers([]string{a.pin, b.pin}, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	select {
	case <-h1.closed:
		t.Fatal("a host admitted before the broker was full was closed by a reload")
	default:
	}
	h1.expectNoError(t)

	// One host leaves: the next is admitted.
	h1.nc.Close()
	waitFor(t, func() bool {
		c, err := dial(t, full, m.ca.Pin(), nats.Token("host-3"))
		if err != nil {
			return false
		}
		c.nc.Close()
		return true
	})
}

// TestHostsLoggingInAtOnceMeetAnExactCap: hosts whose logins are decided at the
// same moment (the Authenticator slow, as a busy control node is) are admitted up
// to the capacity and no further. Before the second look under one lock with the
// host's joining its account, every one of them found the last place free.
func TestHostsLoggingInAtOnceMeetAnExactCap(t *testing.T) {
	m := newMesh(t)
	auth := &fakeAuth{decide: func(c broker.Client) (broker.Grant, error) {
		if strings.HasPrefix(c.Token, "own-") { // the control plane's, no hosts
			return everything(c.Token, broker.AccountHosts), nil
		}
		time.Sleep(200 * time.Millisecond)
		g := everything(c.Token, broker.AccountHosts)
		g.Host = true
		return g, nil
	}}
	s, _ := startWith(t, m, auth, func(c *broker.Config) {
		c.Capacity = broker.Capacity{MaxConnections: 40, MaxHosts: 3}
	})
	mustDial(t, s, m.ca.Pin(), nats.Token("own-1"))
	mustDial(t, s, m.ca.Pin(), nats.Token("own-2"))
	const logins = 12
	var wg sync.WaitGroup
	var admitted atomic.Int32
	for i := range logins {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c, err := dial(t, s, m.ca.Pin(), nats.Token(fmt.Sprintf("host-%d", i))); err == nil {
				admitted.Add(1)
				t.Cleanup(c.nc.Close)
			}
		}()
	}
	wg.Wait()
	if n := admitted.Load(); n != 3 {
		t.Fatalf("%d of %d hosts logging in at once admitted on a broker for 3", n, logins)
	}
	if n := s.EventCounts().Refused[broker.ErrFull.Code]; n != logins-3 {
		t.Errorf("refusals counted as full: %d, want %d", n, logins-3)
	}
}
