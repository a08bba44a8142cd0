package integration

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/integration/harness"
)

// Helpers of the network-fault tests (netns_*_test.go): packets dropped in silence
// by nftables on the router, delay and loss by netem, control planes of three
// machines. Their namespaces start with "nf" and their addresses are in 10.77.0.0/16.

// needNft skips a test that drops packets with nftables where it is missing.
func needNft(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("needs nftables' nft command to drop packets without a reset (.ci/run installs it); TestSilentCutNoticedByTheKernel covers a cut both ways with a blackhole route")
	}
}

// nft loads script into namespace ns's nftables.
func (n *netns) nft(ns, script string) {
	n.t.Helper()
	cmd := exec.Command("ip", in(ns, "nft", "-f", "-")...)
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		n.t.Fatalf("nft in %s: %v\n%s\n%s", ns, err, out, script)
	}
}

// drop makes router ns drop, without a word, what goes from each source to each
// destination (addresses or prefixes); heal removes every such rule.
func (n *netns) drop(router string, from, to []string) {
	n.t.Helper()
	n.nft(router, fmt.Sprintf(`table ip nf {
	chain nfdrop {
		type filter hook forward priority 0; policy accept;
		ip saddr { %s } ip daddr { %s } drop
	}
}
`, strings.Join(from, ", "), strings.Join(to, ", ")))
}

func (n *netns) heal(router string) {
	n.t.Helper()
	if out, err := exec.Command("ip", in(router, "nft", "delete", "table", "ip", "nf")...).CombinedOutput(); err != nil {
		n.t.Fatalf("nft delete table in %s: %v %s", router, err, out)
	}
}

// controlPlane3 makes cp-1 (bootstrapped), cp-2 and cp-3 (joined) on machines
// behind router at 10.77.{base+1,2,3}.2, serving with flags (and metrics on port
// 25090), and waits for three voters.
func (n *netns) controlPlane3(router string, base int, mesh string, flags ...string) []*machine {
	n.t.Helper()
	cp1 := n.bootstrapCP(router, base, mesh, flags...)
	return n.joinCPs(router, base, cp1, flags...)
}

// bootstrapCP makes cp-1 at 10.77.{base+1}.2 and serves it with flags.
func (n *netns) bootstrapCP(router string, base int, mesh string, flags ...string) *machine {
	t := n.t
	t.Helper()
	m := n.behind(router, "cp-1", fmt.Sprintf("10.77.%d", base+1))
	if r := m.ctl(t, "bootstrap", "--mesh", mesh, "--listen", m.ip+":7300"); r.Code != 0 {
		t.Fatalf("bootstrap: %s", r.Combined())
	}
	nfServe(t, m, flags...)
	return m
}

func nfServe(t *testing.T, m *machine, flags ...string) {
	t.Helper()
	m.serve(t, 60*time.Second, append([]string{"--metrics-listen", m.ip + ":25090"}, flags...)...)
}

// joinCPs joins cp-2 and cp-3 at 10.77.{base+2,3}.2 with tokens minted on cp1,
// serves them with flags, and waits for three voters; it returns the three.
func (n *netns) joinCPs(router string, base int, cp1 *machine, flags ...string) []*machine {
	t := n.t
	t.Helper()
	cps := []*machine{cp1}
	for i := 2; i <= 3; i++ {
		id := fmt.Sprintf("cp-%d", i)
		m := n.behind(router, id, fmt.Sprintf("10.77.%d", base+i))
		tok := cp1.ctl(t, "token", "--role", "control", "--node", id, "--addr", m.ip+":7300")
		if tok.Code != 0 {
			t.Fatalf("control token %s: %s", id, tok.Combined())
		}
		if r := m.run(t, tok.Stdout, bin.Meshctl, "join", "--data", m.dir, "--raft-heartbeat", "500ms"); r.Code != 0 {
			t.Fatalf("join %s (exit %d):\n%s", id, r.Code, r.Combined())
		}
		nfServe(t, m, flags...)
		cps = append(cps, m)
	}
	harness.Eventually(t, 30*time.Second, "three voters", func() bool {
		voters := 0
		for _, c := range nfView(t, cp1).Control {
			if c.Raft == api.RaftVoter || c.Raft == api.RaftLeader {
				voters++
			}
		}
		return voters == 3
	})
	return cps
}

// nfView is the roster as m's meshctl sees it (empty when it cannot).
func nfView(t *testing.T, m *machine, extra ...string) api.NodesResult {
	t.Helper()
	r := m.ctl(t, append([]string{"nodes", "--json"}, extra...)...)
	var res api.NodesResult
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &res) != nil {
		return api.NodesResult{}
	}
	return res
}

// homeName returns a node id of the form prefix-N whose first broker (the agent
// rotates the mesh's list, oldest control node first, by an FNV-32a hash of its id)
// is the i-th of n.
func homeName(prefix string, i, n int) string {
	for k := 1; ; k++ {
		name := fmt.Sprintf("%s-%d", prefix, k)
		h := fnv.New32a()
		h.Write([]byte(name))
		if int(h.Sum32()%uint32(n)) == i {
			return name
		}
	}
}

// host enrols a host machine with a token minted on cp and starts its agent with
// flags; it returns the machine.
func (n *netns) enrolHost(router, name, subnet string, cp *machine, flags ...string) *machine {
	t := n.t
	t.Helper()
	m := n.behind(router, name, subnet)
	tok := cp.ctl(t, "token", "--node", name)
	if tok.Code != 0 {
		t.Fatalf("token %s: %s", name, tok.Combined())
	}
	if r := m.run(t, tok.Stdout, bin.Meshhost, "enrol", "--state", m.dir); r.Code != 0 {
		t.Fatalf("enrol %s: %s", name, r.Combined())
	}
	m.proc = harness.Start(t, nil, "ip", in(m.ns, append([]string{bin.Meshhost, "run", "--state", m.dir, "--root", filepath.Join(m.dir, "managed")}, flags...)...)...)
	return m
}

// connectedTo is the broker the agent's log says it connected to last ("" if none).
func connectedTo(m *machine) string {
	out := m.proc.Output()
	i := strings.LastIndex(out, "connected to the mesh")
	if i < 0 {
		return ""
	}
	line := out[i:]
	if j := strings.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	if k := strings.Index(line, "broker="); k >= 0 {
		f := strings.Fields(line[k+len("broker="):])
		if len(f) > 0 {
			return strings.TrimPrefix(strings.Trim(f[0], `"`), "tls://")
		}
	}
	return ""
}
