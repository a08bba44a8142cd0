package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/integration/harness"
)

// TestRenumberedControlNode: a control node's machine gets another address (a new
// DHCP lease, a move to another subnet) and its serve is restarted. The node's
// addresses are in its certificate, the replicated state, its hosts' identities and
// the tokens minted: serve cannot listen where it listened, and says so at once,
// naming the address and what to do (docs/operations.md, "Moving a control node to
// another address"). Done as it says (the old address back as a second one), serve
// starts, and the host whose identity names only the old address converges again.
func TestRenumberedControlNode(t *testing.T) {
	t.Parallel() // mostly waits (grace periods, timeouts): see TestMain
	n := newNetns(t, "nfr", "TestMovingALoneControlNode")
	router := n.router("r")
	cp := n.behind(router, "cp", "10.77.61")
	cp.bootstrap(t, "renumber")
	host := n.enrolHost(router, "web-1", "10.77.62", cp, "--heartbeat", "1s")
	body := filepath.Join(t.TempDir(), "b.json")
	declare := func(content string) {
		t.Helper()
		writeFile(t, body, `{"files":[{"path":"state","content":"`+content+`"}]}`)
		if r := cp.ctl(t, "declare", "--node", "web-1", "--file", body, "--wait", "30s"); r.Code != 0 {
			t.Fatalf("declare %q: %s", content, r.Combined())
		}
	}
	declare("before")
	cp.proc.Kill()
	// The machine's address changes.
	n.ip("-n", cp.ns, "addr", "del", cp.ip+"/24", "dev", "eth0")
	n.ip("-n", cp.ns, "addr", "add", "10.77.61.9/24", "dev", "eth0")
	n.ip("-n", cp.ns, "route", "add", "default", "via", "10.77.61.1")

	began := time.Now()
	p := harness.Start(t, nil, "ip", in(cp.ns, bin.Meshctl, "serve", "--data", cp.dir, "--address-wait", "2s")...)
	code := p.Wait(60 * time.Second)
	took := time.Since(began)
	out := p.Output()
	t.Logf("serve on the renumbered machine: exit %d after %s:\n%s", code, took.Round(100*time.Millisecond), lastN(out, 2500))
	if code == 0 || took > 20*time.Second {
		t.Fatalf("serve on a machine that no longer has its address: exit %d after %s, want a failure within 20 s", code, took)
	}
	if !strings.Contains(out, cp.ip) || !strings.Contains(out, "ip addr add ADDRESS/32") || !strings.Contains(out, "Moving a control node") ||
		!strings.Contains(out, "waiting for an address of this control node") || !strings.Contains(out, "waited 2s") {
		t.Fatalf("serve's failure does not say it waited for the address it no longer has (%s), how to get it back and how to move a control node", cp.ip)
	}

	// As the message says: the old address back, as a second one, while serve
	// waits for it (as for an IPv6 address in duplicate address detection, or a
	// lease late at boot): it starts once the address is there.
	cp.proc = harness.Start(t, nil, "ip", in(cp.ns, bin.Meshctl, "serve", "--data", cp.dir)...)
	cp.proc.WaitOutput(t, "waiting for an address of this control node", 10*time.Second)
	n.ip("-n", cp.ns, "addr", "add", cp.ip+"/32", "dev", "eth0")
	cp.proc.WaitOutput(t, "control node ready", 30*time.Second)
	declare("after the renumbering")
	if b, _ := os.ReadFile(filepath.Join(host.dir, "managed", "state")); string(b) != "after the renumbering" {
		t.Fatalf("web-1's state = %q", b)
	}
}

func lastN(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
