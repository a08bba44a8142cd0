package integration

import (
	"strings"
	"testing"
	"time"

	"mesh/integration/harness"
)

// TestControlTrafficOnItsOwnNetwork: control nodes whose Raft and cluster addresses
// are on other IPs than their brokers (hosts on one network, control traffic on
// another) join and route. Before, a joined node's certificate carried its broker's
// IP alone and the bootstrap node's left out its cluster address: the leader's Raft
// dial failed "certificate is valid for 127.0.0.4, not 127.0.0.5" and the join was
// rolled back after 45 s.
func TestControlTrafficOnItsOwnNetwork(t *testing.T) {
	t.Parallel()
	cp1 := harness.NewControlPlaneOn(t, bin, "nets", [3]string{"127.0.0.1", "127.0.0.2", "127.0.0.3"})
	cp1.Serve()
	tok, cp2 := cp1.ControlTokenOn("cp-2", [3]string{"127.0.0.4", "127.0.0.5", "127.0.0.6"})
	if r := cp2.Join(tok); r.Code != 0 || !strings.Contains(r.Stdout, "NATS route up over mutual TLS to cp-1 (routes configured: "+cp1.Cluster+")") {
		t.Fatalf("join cp-2 with Raft and routes on other IPs (exit %d):\n%s", r.Code, r.Combined())
	}
	cp2.Serve()
	// An operator on cp-2's broker is answered by the leader, cp-1, over the route
	// between their cluster addresses.
	harness.Eventually(t, 20*time.Second, "cp-2's broker routes operator requests to the leader", func() bool {
		return cp2.Ctl("nodes").Code == 0
	})
	if r := cp2.Ctl("control", "status"); r.Code != 0 || !strings.Contains(r.Stdout, "cp-2") {
		t.Fatalf("control status via cp-2 (exit %d):\n%s", r.Code, r.Combined())
	}
}
