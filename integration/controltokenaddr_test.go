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
		{cp.Listen, "the new control node's broker address (--addr), " + cp.Listen + ", is cp-1's broker address"},
		// Its broker one port above: the member's Raft port.
		{net.JoinHostPort(host, strconv.Itoa(p+1)), "broker address (--addr), " + net.JoinHostPort(host, strconv.Itoa(p+1)) + ", is cp-1's Raft address"},
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
	own := net.JoinHostPort(host, strconv.Itoa(p+10))
	if r := cp.Ctl("token", "--role", "control", "--node", "cp-2", "--addr", own); r.Code != 0 {
		t.Errorf("a control token with addresses of its own: exit %d\n%s", r.Code, r.Combined())
	}
	// Addresses cp-2's pending token names, for another node: refused (a docs
	// walkthrough: minted, the second join was admitted, handed the keys, and
	// failed at Raft, "duplicate address", at every rerun it was told to make);
	// for cp-2 itself, --replace mints it again.
	for _, c := range []struct{ addr, want string }{
		{own, "broker address (--addr), " + own + ", is the broker address of cp-2's pending control token"},
		// Which of the new node's addresses: its Raft address, derived from
		// --addr, which the operator did not type (a walkthrough).
		{net.JoinHostPort(host, strconv.Itoa(p+9)), "Raft address (--raft-addr; by default --addr's port + 1), " + net.JoinHostPort(host, strconv.Itoa(p+10)) + ", is the broker address of cp-2's pending control token"},
	} {
		r := cp.Ctl("token", "--role", "control", "--node", "cp-3", "--addr", c.addr)
		if r.Code != 4 || !strings.Contains(r.Stderr, c.want) || !strings.Contains(r.Stderr, "meshctl token cancel cp-2") || r.Stdout != "" {
			t.Errorf("control token for cp-3 at %s: exit %d, want 4 saying %q\n%s", c.addr, r.Code, c.want, r.Combined())
		}
	}
	if r := cp.Ctl("token", "--role", "control", "--node", "cp-2", "--addr", own, "--replace"); r.Code != 0 {
		t.Errorf("cp-2's control token minted again at its addresses: exit %d\n%s", r.Code, r.Combined())
	}
	if r := cp.Ctl("token", "cancel", "cp-2"); r.Code != 0 {
		t.Fatalf("token cancel cp-2: %s", r.Combined())
	}
	if r := cp.Ctl("token", "--role", "control", "--node", "cp-3", "--addr", own); r.Code != 0 {
		t.Errorf("cp-3's control token at the addresses of cp-2's cancelled one: exit %d\n%s", r.Code, r.Combined())
	}
}
