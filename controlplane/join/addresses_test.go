package join

import (
	"strings"
	"testing"
)

// TestControlAddressesAtTheTopPort: a broker address on port 65535 or 65534 is
// concrete, and refused only when a default it would give (port plus 1 or 2) is
// past 65535: `meshctl token --role control --addr 127.0.0.1:65535` with both
// --raft-addr and --cluster-addr was refused as "not the new node's concrete
// ip:port".
func TestControlAddressesAtTheTopPort(t *testing.T) {
	got, err := ControlAddresses("10.0.0.2:65535", "10.0.0.2:7301", "10.0.0.2:7302")
	if err != nil || got.Broker != "10.0.0.2:65535" || got.Raft != "10.0.0.2:7301" || got.Cluster != "10.0.0.2:7302" {
		t.Fatalf("65535 with both given: %+v, %v", got, err)
	}
	got, err = ControlAddresses("10.0.0.2:65534", "", "10.0.0.2:7302")
	if err != nil || got.Raft != "10.0.0.2:65535" {
		t.Fatalf("65534 with the cluster address given: %+v, %v", got, err)
	}
	for _, c := range []struct{ broker, raft, cluster, want string }{
		{"10.0.0.2:65535", "", "", "give --raft-addr and --cluster-addr"},
		{"10.0.0.2:65535", "10.0.0.2:7301", "", "give --cluster-addr,"},
		{"10.0.0.2:65534", "10.0.0.2:7301", "", "give --cluster-addr,"},
	} {
		_, err := ControlAddresses(c.broker, c.raft, c.cluster)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "past 65535") {
			t.Errorf("ControlAddresses(%q, %q, %q) = %v, want a refusal saying %q", c.broker, c.raft, c.cluster, err, c.want)
		}
	}
}
