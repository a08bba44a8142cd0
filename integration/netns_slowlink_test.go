package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/integration/harness"
)

// TestLossyFarLink: hosts behind a link of 300 ms each way and 5% loss each way
// (netem on both ends of its cable), as a satellite or a congested long-haul path
// gives; where the kernel has no netem, 5% loss each way alone (nftables on the
// router), and TestSlowLink covers latency through a proxy. Enrolment, the first connection and a declaration's convergence complete
// within the timeouts docs/operations.md lists ("Timeouts hosts live by"), several
// times over.
func TestLossyFarLink(t *testing.T) {
	t.Parallel() // mostly waits (grace periods, timeouts): see TestMain
	n := newNetns(t, "nfs", "TestSlowLink")
	router := n.router("r")
	cp := n.behind(router, "cp", "10.77.51")
	cp.bootstrap(t, "farlink")
	const hosts = 3
	var far []*machine
	for i := range hosts {
		name := []string{"far-1", "far-2", "far-3"}[i]
		m := n.behind(router, name, []string{"10.77.52", "10.77.53", "10.77.54"}[i])
		if !lossy(t, n, router, m, name) {
			return
		}
		far = append(far, m)
	}
	for _, m := range far {
		id := filepath.Base(m.dir)
		tok := cp.ctl(t, "token", "--node", id)
		began := time.Now()
		r := m.run(t, tok.Stdout, bin.Meshhost, "enrol", "--state", m.dir)
		if r.Code != 0 {
			t.Fatalf("enrol %s across 300 ms and 5%% loss each way (exit %d after %s):\n%s", id, r.Code, time.Since(began).Round(100*time.Millisecond), r.Combined())
		}
		t.Logf("%s enrolled in %s", id, time.Since(began).Round(100*time.Millisecond))
		m.proc = harness.Start(t, nil, "ip", in(m.ns, bin.Meshhost, "run", "--state", m.dir, "--root", filepath.Join(m.dir, "managed"))...)
	}
	body := filepath.Join(t.TempDir(), "b.json")
	writeFile(t, body, `{"files":[{"path":"state","content":"far away"}]}`)
	began := time.Now()
	r := cp.ctl(t, "declare", "--all", "--file", body, "--wait", "60s")
	if r.Code != 0 {
		t.Fatalf("declare --wait across the lossy links: exit %d after %s:\n%s", r.Code, time.Since(began).Round(100*time.Millisecond), r.Combined())
	}
	t.Logf("declare --all --wait converged %d hosts in %s", hosts, time.Since(began).Round(100*time.Millisecond))
	for _, m := range far {
		if b, _ := os.ReadFile(filepath.Join(m.dir, "managed", "state")); string(b) != "far away" {
			t.Fatalf("%s: state = %q", m.ns, b)
		}
	}
}

// lossy makes m's link lossy, and slow where it can: netem, 300 ms and 5% loss on both
// ends of its cable; without netem (a kernel built without sch_netem), 5% loss each
// way dropped at random by the router's nftables. It skips the test, saying why,
// when neither is there.
func lossy(t *testing.T, n *netns, router string, m *machine, name string) bool {
	t.Helper()
	var failed []byte
	for _, dev := range [][]string{{m.ns, "eth0"}, {router, "r-" + name}} {
		out, err := exec.Command("ip", in(dev[0], "tc", "qdisc", "add", "dev", dev[1], "root", "netem", "delay", "300ms", "loss", "5%")...).CombinedOutput()
		if err != nil {
			failed = out
			break
		}
	}
	if failed == nil {
		return true
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skipf("no netem here (%s) and no nft: nothing to make the link lossy with; TestSlowLink covers latency through a proxy", strings.TrimSpace(string(failed)))
		return false
	}
	t.Logf("no netem in this kernel (%s): %s loses 5%% each way, without added latency (TestSlowLink covers latency)", strings.TrimSpace(string(failed)), name)
	n.nft(router, fmt.Sprintf(`table ip nfloss {
	chain nfloss {
		type filter hook forward priority 0; policy accept;
		ip saddr %[1]s numgen random mod 100 < 5 drop
		ip daddr %[1]s numgen random mod 100 < 5 drop
	}
}
`, m.ip))
	return true
}
