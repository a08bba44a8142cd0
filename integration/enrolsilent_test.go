package integration

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"mesh/integration/harness"
	"mesh/tokenfmt"
)

// TestEnrolReachesTheMeshPastSilentBrokers: a token whose first brokers take the
// connection and never answer (a control node gone behind a firewall that drops, a
// wedged machine) enrols with the built meshhost at the broker that answers, the
// next broker tried once one has gone 2 s unanswered. One after another, three
// such brokers cost three 10 s dial timeouts before the real one was tried (16 cost
// 160 s); the silent ones are not named in what enrol printed, their attempts only
// ended.
func TestEnrolReachesTheMeshPastSilentBrokers(t *testing.T) {
	t.Parallel() // mostly waits on the silent brokers: see TestMain
	cp := harness.NewControlPlane(t, bin, "silentfirst")
	cp.Serve()
	tok, err := tokenfmt.Parse(cp.Token("web-1"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var silent []netip.AddrPort
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				t.Cleanup(func() { c.Close() })
			}
		}()
		silent = append(silent, netip.MustParseAddrPort(l.Addr().String()))
	}
	tok.Brokers = append(silent, tok.Brokers...)
	web := harness.NewHost(t, bin, "web-1")
	p := harness.StartWithInput(t, tok.Encode(), bin.Meshhost, "enrol", "--state", web.State)
	// Staggered: the mesh's broker is tried some 6 s in; one after another it
	// would be 30 s.
	code := p.Wait(20 * time.Second)
	if code != 0 {
		p.Kill()
		t.Fatalf("enrol with three silent brokers before the mesh's: exit %d within 20 s (-1: still running), want 0:\n%s", code, p.Output())
	}
	for _, s := range silent {
		if strings.Contains(p.Output(), s.String()) {
			t.Errorf("enrol names the silent broker %s, whose attempt was only ended:\n%s", s, p.Output())
		}
	}
	if r := harness.Run(t, "", nil, bin.Meshhost, "status", "--state", web.State); r.Code != 0 || !strings.Contains(r.Stdout, "web-1") {
		t.Fatalf("status after the enrolment: %s", r.Combined())
	}
}
