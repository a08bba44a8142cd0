// Package freeport picks loopback ports for processes and listeners a test starts
// later, away from the ports the kernel hands to outgoing connections. It imports
// nothing of the mesh, so that the packages' own tests use it as the integration
// harness does.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync/atomic"
	"testing"
)

// Ports returns n distinct TCP ports on 127.0.0.1 that were free a moment ago,
// for processes the test starts later (often much later: a control node's ports are
// chosen with its token).
//
// They come from below the kernel's ephemeral range where it has one. A port from
// that range, as a listener on port 0 gets, may be handed to any outgoing
// connection, of this test or of another test process, between now and its use,
// and the process started on it then fails with "address already in use". Below
// it, ports are handed out in turn from a random starting place (portCursor), so
// that this process hands out no port twice until it has gone round the range, and
// test processes side by side use different stretches of it.
func Ports(t testing.TB, n int) []int {
	t.Helper()
	low, high := belowEphemeral()
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for tries := 0; len(ports) < n; tries++ {
		addr := "127.0.0.1:0"
		if high > low && tries < 1000 {
			addr = fmt.Sprintf("127.0.0.1:%d", nextPort(low, high))
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			if addr == "127.0.0.1:0" {
				t.Fatal(err)
			}
			continue // taken; try the next
		}
		lns = append(lns, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// portCursor is where FreePorts looks next, for the whole test process (0: not
// started). It is the one piece of process-wide state here: a port handed out and
// released waits for its process, and no later call of any test may hand it out
// again meanwhile.
var portCursor atomic.Uint64

// nextPort returns the next port in [low, high) to try.
func nextPort(low, high int) int {
	span := uint64(high - low)
	for {
		c := portCursor.Load()
		if c == 0 {
			portCursor.CompareAndSwap(0, rand.Uint64N(span)+1)
			continue
		}
		if portCursor.CompareAndSwap(c, c+1) {
			return low + int(c%span)
		}
	}
}

// belowEphemeral returns the ports [low, high) Ports chooses from: from 10000
// up to the start of the kernel's ephemeral range, or an empty range where that is
// unknown or too low.
func belowEphemeral() (low, high int) {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	var first, last int
	if _, err := fmt.Sscan(string(data), &first, &last); err != nil || first < 12000 {
		return 0, 0
	}
	return 10000, first
}

// Addrs is Ports as "127.0.0.1:PORT" addresses.
func Addrs(t testing.TB, n int) []string {
	t.Helper()
	addrs := make([]string, 0, n)
	for _, p := range Ports(t, n) {
		addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", p))
	}
	return addrs
}
