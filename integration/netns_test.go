package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/host/link"
	"mesh/integration/harness"
)

// netns is a set of network namespaces the test made, removed when it ends.
type netns struct {
	t      *testing.T
	prefix string
	names  []string
}

func (n *netns) ip(args ...string) {
	n.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		n.t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func (n *netns) add(name string) string {
	full := n.prefix + name
	n.ip("netns", "add", full)
	n.names = append(n.names, full)
	n.ip("-n", full, "link", "set", "lo", "up")
	return full
}

// link joins two namespaces with a veth pair and addresses both ends.
func (n *netns) link(a, aIf, aAddr, b, bIf, bAddr string) {
	n.ip("link", "add", aIf, "netns", a, "type", "veth", "peer", "name", bIf, "netns", b)
	n.ip("-n", a, "addr", "add", aAddr, "dev", aIf)
	n.ip("-n", b, "addr", "add", bAddr, "dev", bIf)
	n.ip("-n", a, "link", "set", aIf, "up")
	n.ip("-n", b, "link", "set", bIf, "up")
}

// newNetns prepares for a test that builds machines out of network namespaces, or
// skips it, saying why and which loopback test covers the same ground.
func newNetns(t *testing.T, tag, coveredBy string) *netns {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("needs root to create network namespaces (CI runs as root); %s covers the same on loopback", coveredBy)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skipf("needs iproute2's ip command (.ci/run installs it); %s covers the same on loopback", coveredBy)
	}
	n := &netns{t: t, prefix: fmt.Sprintf("%s%d-", tag, os.Getpid()%100000)}
	if out, err := exec.Command("ip", "netns", "add", n.prefix+"probe").CombinedOutput(); err != nil {
		t.Skipf("cannot create network namespaces here (%v: %s)", err, strings.TrimSpace(string(out)))
	}
	n.names = append(n.names, n.prefix+"probe")
	t.Cleanup(func() {
		for _, name := range n.names {
			exec.Command("ip", "netns", "del", name).Run()
		}
	})
	return n
}

// in wraps a command to run inside a namespace.
func in(ns string, args ...string) []string { return append([]string{"netns", "exec", ns}, args...) }

// router adds a namespace that forwards between the machines behind it.
func (n *netns) router(name string) string {
	n.t.Helper()
	ns := n.add(name)
	if out, err := exec.Command("ip", in(ns, "sysctl", "-qw", "net.ipv4.ip_forward=1")...).CombinedOutput(); err != nil {
		n.t.Fatalf("enable forwarding in %s: %v %s", ns, err, out)
	}
	return ns
}

// machine is a namespace standing for a machine: its address and, for a control
// node, its data directory and its serve process.
type machine struct {
	ns   string
	ip   string
	dir  string
	proc *harness.Process
}

// behind adds machine name, linked to router on the /24 whose first three octets are
// subnet: the machine is .2, the router .1 and the machine's default route.
func (n *netns) behind(router, name, subnet string) *machine {
	n.t.Helper()
	ns := n.add(name)
	n.link(ns, "eth0", subnet+".2/24", router, "r-"+name, subnet+".1/24")
	n.ip("-n", ns, "route", "add", "default", "via", subnet+".1")
	return &machine{ns: ns, ip: subnet + ".2", dir: filepath.Join(n.t.TempDir(), name)}
}

// run runs a command inside m's namespace.
func (m *machine) run(t *testing.T, stdin string, args ...string) harness.Result {
	t.Helper()
	return harness.Run(t, stdin, nil, "ip", in(m.ns, args...)...)
}

// ctl runs meshctl inside m's namespace on m's data directory.
func (m *machine) ctl(t *testing.T, args ...string) harness.Result {
	t.Helper()
	return m.run(t, "", append([]string{bin.Meshctl}, append(args, "--data", m.dir)...)...)
}

// bootstrap makes m the first control node of mesh, its broker on m's address, and
// starts it with short Raft and reconcile periods.
func (m *machine) bootstrap(t *testing.T, mesh string) {
	t.Helper()
	if r := m.ctl(t, "bootstrap", "--mesh", mesh, "--listen", m.ip+":7300"); r.Code != 0 {
		t.Fatalf("bootstrap in %s: %s", m.ns, r.Combined())
	}
	m.serve(t, 30*time.Second, "--raft-heartbeat", "300ms", "--reconcile", "1s")
}

// serve starts meshctl serve on m with flags and waits until it is ready.
func (m *machine) serve(t *testing.T, ready time.Duration, flags ...string) {
	t.Helper()
	m.proc = harness.Start(t, nil, "ip", in(m.ns, append([]string{bin.Meshctl, "serve", "--data", m.dir}, flags...)...)...)
	m.proc.WaitOutput(t, "control node ready", ready)
}

// TestSeparateMachines: network namespaces act as a control-plane machine, a host
// machine and a router between them. An attacker's namespace takes over the broker's
// address on the path: the host refuses it before sending anything. Once the real
// route is back, enrolment succeeds and the host converges across the router.
func TestSeparateMachines(t *testing.T) {
	t.Parallel() // mostly waits (grace periods, timeouts): see TestMain
	n := newNetns(t, "mesh", "TestImpostorRefusedBeforeAnyCredential")

	router := n.router("router")
	cp, host, att := n.behind(router, "cp", "10.71.1"), n.behind(router, "host", "10.71.2"), n.behind(router, "attacker", "10.71.3")
	hostNS, attacker := host.ns, att.ns
	// The attacker owns the broker's address on its own machine, ready to answer.
	n.ip("-n", attacker, "addr", "add", "10.71.1.2/32", "dev", "eth0")

	// The control-plane machine.
	broker := cp.ip + ":7300"
	ctl := func(args ...string) harness.Result { return cp.ctl(t, args...) }
	cp.bootstrap(t, "twomachines")
	tok := ctl("token", "--node", "web-1")
	if tok.Code != 0 {
		t.Fatalf("token: %s", tok.Combined())
	}

	// The attacker answers at the broker's address and the router sends it the traffic.
	stats := filepath.Join(t.TempDir(), "impostor.json")
	imp := harness.Start(t, nil, "ip", in(attacker, bin.Impostor, "--listen", broker, "--stats", stats)...)
	imp.WaitOutput(t, "impostor listening", 10*time.Second)
	n.ip("-n", router, "route", "add", "10.71.1.2/32", "via", "10.71.3.2")

	state := filepath.Join(t.TempDir(), "host")
	enrolCmd := in(hostNS, bin.Meshhost, "enrol", "--state", state)
	r := harness.Run(t, tok.Stdout, nil, "ip", enrolCmd...)
	if r.Code != hostExitSubstituted || !strings.Contains(r.Combined(), "retrying will not help") {
		t.Fatalf("with the attacker on the path: exit %d:\n%s", r.Code, r.Combined())
	}
	time.Sleep(300 * time.Millisecond)
	var got map[string]int64
	data, err := os.ReadFile(stats)
	if err != nil || json.Unmarshal(data, &got) != nil {
		t.Fatalf("impostor stats: %v %s", err, data)
	}
	if got["connections"] == 0 {
		t.Fatal("the host never reached the attacker: the takeover did not happen")
	}
	if got["in_bytes"] != 0 || got["credentials"] != 0 {
		t.Fatalf("the attacker received %d application bytes and %d credentials, want 0 and 0", got["in_bytes"], got["credentials"])
	}

	// The real route is back: the same token enrols, and the host converges.
	n.ip("-n", router, "route", "del", "10.71.1.2/32", "via", "10.71.3.2")
	if r := harness.Run(t, tok.Stdout, nil, "ip", enrolCmd...); r.Code != 0 {
		t.Fatalf("enrol once the route is back (exit %d):\n%s", r.Code, r.Combined())
	}
	agent := harness.Start(t, nil, "ip", in(hostNS, bin.Meshhost, "run", "--state", state, "--root", filepath.Join(state, "managed"), "--heartbeat", "1s")...)
	body := filepath.Join(t.TempDir(), "b.json")
	writeFile(t, body, `{"files":[{"path":"hello","content":"across the router"}]}`)
	if r := ctl("declare", "--node", "web-1", "--file", body); r.Code != 0 {
		t.Fatalf("declare: %s", r.Combined())
	}
	harness.Eventually(t, 30*time.Second, "web-1 applies v1 across the router", func() bool {
		r := ctl("nodes", "--json")
		return strings.Contains(r.Stdout, `"applied_version": 1`)
	})
	if b, _ := os.ReadFile(filepath.Join(state, "managed", "hello")); string(b) != "across the router" {
		t.Fatalf("hello = %q\nagent:\n%s", b, agent.Output())
	}
}

// TestSilentCutNoticedByTheKernel: the router between a host and its control plane
// starts dropping their packets without a word (a blackhole route: no reset, no ICMP).
// The agent's connection is idle between heartbeats, so only the kernel's keepalive
// and TCP_USER_TIMEOUT can notice: it must hear of the cut well before its NATS pings
// would (link.PingInterval × link.MaxPingsOutstanding, 40 s), and stay connected on the
// healthy link before it, where keepalive probes are answered. Once the route is back it
// reconnects and applies what was declared meanwhile.
func TestSilentCutNoticedByTheKernel(t *testing.T) {
	t.Parallel() // mostly waits (grace periods, timeouts): see TestMain
	n := newNetns(t, "cut", "TestPartitionConvergesToNewest")
	router := n.router("router")
	cp, host := n.behind(router, "cp", "10.72.1"), n.behind(router, "host", "10.72.2")
	ctl := func(args ...string) harness.Result { return cp.ctl(t, args...) }
	cp.bootstrap(t, "silentcut")
	tok := ctl("token", "--node", "web-1")
	if tok.Code != 0 {
		t.Fatalf("token: %s", tok.Combined())
	}
	state := filepath.Join(t.TempDir(), "host")
	if r := host.run(t, tok.Stdout, bin.Meshhost, "enrol", "--state", state); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	// The default heartbeat (15 s): between two, nothing is in flight.
	agent := harness.Start(t, nil, "ip", in(host.ns, bin.Meshhost, "run", "--state", state, "--root", filepath.Join(state, "managed"))...)
	harness.Eventually(t, 30*time.Second, "web-1 alive", func() bool {
		return strings.Contains(ctl("nodes", "--json").Stdout, `"state": "alive"`)
	})

	// A healthy, idle link through more than one keepalive period stays up.
	time.Sleep(link.KeepAliveIdle + 2*link.KeepAliveInterval)
	if strings.Contains(agent.Output(), "disconnected") {
		t.Fatalf("the agent dropped a healthy idle link:\n%s", agent.Output())
	}

	// Both ways: a cut that lets the broker's packets through delivers declarations.
	n.ip("-n", router, "route", "add", "blackhole", cp.ip+"/32")
	n.ip("-n", router, "route", "add", "blackhole", host.ip+"/32")
	cut := time.Now()
	body := filepath.Join(t.TempDir(), "b.json")
	writeFile(t, body, `{"files":[{"path":"hello","content":"declared during the cut"}]}`)
	if r := ctl("declare", "--node", "web-1", "--file", body); r.Code != 0 {
		t.Fatalf("declare during the cut: %s", r.Combined())
	}
	// With TCP_USER_TIMEOUT set, keepalive gives up once the link has been silent for
	// UserTimeout (15 s); data sent meanwhile (a heartbeat, a ping) gives up UserTimeout
	// after it was sent. The worst case is a heartbeat just before keepalive would have
	// given up: about 30 s. Pings alone need two intervals past the last pong: 40 s.
	limit := link.PingInterval*link.MaxPingsOutstanding - 5*time.Second
	agent.WaitOutput(t, "disconnected from the mesh", limit)
	noticed := time.Since(cut)
	t.Logf("the agent noticed the silent cut after %s (pings alone: %s or more)", noticed.Round(100*time.Millisecond), link.PingInterval*link.MaxPingsOutstanding)
	if _, err := os.Stat(filepath.Join(state, "managed", "hello")); err == nil {
		t.Fatal("a declaration crossed the blackhole")
	}

	n.ip("-n", router, "route", "del", "blackhole", cp.ip+"/32")
	n.ip("-n", router, "route", "del", "blackhole", host.ip+"/32")
	harness.Eventually(t, 45*time.Second, "web-1 applies v1 after the cut heals", func() bool {
		return strings.Contains(ctl("nodes", "--json").Stdout, `"applied_version": 1`)
	})
	if b, _ := os.ReadFile(filepath.Join(state, "managed", "hello")); string(b) != "declared during the cut" {
		t.Fatalf("hello = %q\nagent:\n%s", b, agent.Output())
	}
}
