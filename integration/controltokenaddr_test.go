package integration

import (
	"net"
	"strconv"
	"strings"
	"testing"

	"mesh/integration/harness"
)

// TestAControlTokenForAMembersAddressIsRefused: a control token naming the address a
// member already listens on (its broker, or its Raft and cluster ports, the two
// after it) was minted, exit 0; the new machine's join or serve failed to bind, or
// on another machine behind the same address took the member's traffic, and the
// token stayed pending. It is refused, exit 4, naming the member and the address,
// and nothing is minted.
func TestAControlTokenForAMembersAddressIsRefused(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "ctladdr")
	cp.Serve()
	host, port, err := net.SplitHostPort(cp.Listen)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	for _, c := range []struct{ addr, want string }{
		{cp.Listen, cp.Listen + " is cp-1's broker address"},
		// Its broker one port above: the member's Raft port.
		{net.JoinHostPort(host, strconv.Itoa(p+1)), net.JoinHostPort(host, strconv.Itoa(p+1)) + " is cp-1's Raft address"},
	} {
		r := cp.Ctl("token", "--role", "control", "--node", "cp-2", "--addr", c.addr)
		if r.Code != 4 || !strings.Contains(r.Stderr, c.want) || r.Stdout != "" {
			t.Errorf("control token at %s: exit %d, want 4 saying %q\n%s", c.addr, r.Code, c.want, r.Combined())
		}
	}
	if r := cp.Ctl("token", "list"); strings.Contains(r.Stdout, "cp-2") {
		t.Errorf("a refused control token is listed:\n%s", r.Stdout)
	}
	// Addresses of its own: minted.
	if r := cp.Ctl("token", "--role", "control", "--node", "cp-2", "--addr", net.JoinHostPort(host, strconv.Itoa(p+10))); r.Code != 0 {
		t.Errorf("a control token with addresses of its own: exit %d\n%s", r.Code, r.Combined())
	}
}
