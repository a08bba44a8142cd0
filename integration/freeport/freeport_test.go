package freeport

import (
	"fmt"
	"net"
	"testing"
)

// TestPortsBelowEphemeral: the ports are distinct across calls, free, and
// outside the range the kernel hands to outgoing connections, where it says which
// range that is.
func TestPortsBelowEphemeral(t *testing.T) {
	low, high := belowEphemeral()
	if high == 0 {
		t.Skip("this system does not say its ephemeral port range (/proc/sys/net/ipv4/ip_local_port_range)")
	}
	// Two calls, as two tests of one process make: no port given twice.
	ports := append(Ports(t, 25), Ports(t, 25)...)
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %d given twice in %v", p, ports)
		}
		seen[p] = true
		if p < low || p >= high {
			t.Fatalf("port %d is outside [%d, %d): the kernel may give it to an outgoing connection", p, low, high)
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Fatalf("port %d is not free: %v", p, err)
		}
		l.Close()
	}
}
