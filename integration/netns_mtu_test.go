package integration

import (
	"strings"
	"testing"
	"time"
)

// TestPathMTUBlackHole: on the way from the control node to a new host, every packet
// larger than 1000 bytes is dropped without a word (a tunnel whose smaller MTU
// nobody announces, with ICMP filtered: a path-MTU black hole). The TCP connection
// opens, the host's ClientHello goes out, and the broker's certificates never arrive.
// meshhost enrol gives up within its dial timeout and says that the network, not
// the token or the mesh, is at fault (exit 7: retrying may help), and that large
// packets may be what is lost.
func TestPathMTUBlackHole(t *testing.T) {
	t.Parallel() // mostly waits (grace periods, timeouts): see TestMain
	n := newNetns(t, "nfm", "TestSlowLink")
	needNft(t)
	router := n.router("r")
	cp := n.behind(router, "cp", "10.77.91")
	cp.bootstrap(t, "mtu")
	host := n.behind(router, "web-1", "10.77.92")
	tok := cp.ctl(t, "token", "--node", "web-1")
	if tok.Code != 0 {
		t.Fatalf("token: %s", tok.Combined())
	}
	n.nft(router, `table ip nf {
	chain nfdrop {
		type filter hook forward priority 0; policy accept;
		ip saddr `+cp.ip+` ip daddr `+host.ip+` meta length > 1000 drop
	}
}
`)
	began := time.Now()
	r := host.run(t, tok.Stdout, bin.Meshhost, "enrol", "--state", host.dir)
	took := time.Since(began)
	t.Logf("enrol through a path-MTU black hole: exit %d after %s:\n%s", r.Code, took.Round(100*time.Millisecond), r.Combined())
	if r.Code != 7 || took > 30*time.Second {
		t.Fatalf("exit %d after %s; want 7 (the mesh could not be reached) within 30 s", r.Code, took)
	}
	if !strings.Contains(r.Combined(), "could be reached") || !strings.Contains(r.Combined(), "MTU") {
		t.Errorf("the failure does not say that the broker could not be reached, nor that large packets may be lost on the path")
	}

	n.heal(router)
	if r := host.run(t, tok.Stdout, bin.Meshhost, "enrol", "--state", host.dir); r.Code != 0 {
		t.Fatalf("enrol once the path carries large packets again: %s", r.Combined())
	}
}
