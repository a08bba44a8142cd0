package integration

import (
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/host/state"
	"mesh/integration/harness"
)

// TestRollingRestartCountsEveryHostOnce: three control nodes and a dozen hosts spread
// over their brokers; each control node in turn stopped and started again, then one
// killed. A broker that stops sends no disconnect event for the connections it
// closes, and one that dies sends nothing: every control node must still count each
// host once (mesh_control_host_connections), see it alive, reach it with a
// declaration, and find its one connection when it is revoked. Before the presence tracker forgot a stopped broker's connections,
// the first stop left the other two counting 22 connections for these 12 hosts until
// they restarted themselves.
func TestRollingRestartCountsEveryHostOnce(t *testing.T) {
	t.Parallel() // mostly waits (grace periods, timeouts): see TestMain
	cps := threeControlNodes(t, "rollfleet")
	cp1, cp2, cp3 := cps[0], cps[1], cps[2]

	const n = 12
	hosts := make([]*harness.Host, n)
	for i := range hosts {
		hosts[i] = harness.NewHost(t, bin, fmt.Sprintf("web-%02d", i))
		if r := hosts[i].Enrol(cp1.Token(hosts[i].Name)); r.Code != 0 {
			t.Fatalf("enrol %s: exit %d:\n%s", hosts[i].Name, r.Code, r.Combined())
		}
		hosts[i].Run()
	}

	// counted waits until the brokers of up hold want host connections between
	// them and every one of up counts want in the mesh and shows want hosts alive.
	counted := func(what string, limit time.Duration, want int, up ...*harness.ControlPlane) {
		t.Helper()
		until(t, what, limit, func() string { return fleetCounts(up, want) })
	}
	counted("the fleet connected", 30*time.Second, n, cps...)

	// A rolling restart. The nodes left up find the stopped broker gone from their
	// routes: its hosts move to them and are counted once, well before the next
	// periodic listing (a minute).
	for i, cp := range cps {
		p := cp.Process()
		p.Signal(syscall.SIGTERM)
		if code := p.Wait(20 * time.Second); code != 0 {
			t.Fatalf("cp-%d stopped with exit %d:\n%s", i+1, code, p.Output())
		}
		counted(fmt.Sprintf("cp-%d stopped: its hosts on the other two", i+1), 20*time.Second, n, others(cps, i)...)
		cp.Serve()
		counted(fmt.Sprintf("cp-%d back", i+1), 20*time.Second, n, cps...)
	}

	// A control node killed: it announces nothing, and the others find its broker
	// gone from their routes.
	cps[1].Process().Kill()
	counted("cp-2 killed: its hosts on the other two", 20*time.Second, n, others(cps, 1)...)
	cps[1].Serve()
	counted("cp-2 back after the kill", 20*time.Second, n, cps...)

	body := t.TempDir() + "/b.json"
	writeFile(t, body, `{"files":[{"path":"f","content":"rolled\n"}]}`)
	if r := cp2.Ctl("declare", "--all", "--wait=60s", "--file", body); r.Code != 0 {
		t.Fatalf("declare: exit %d:\n%s", r.Code, r.Combined())
	}
	for _, h := range hosts {
		if got, _ := h.ReadManaged("f"); got != "rolled\n" {
			t.Fatalf("%s holds %q", h.Name, got)
		}
	}
	for i, cp := range cps {
		if k := cp.Counter("mesh_control_budget_disconnects_total"); k != 0 {
			t.Errorf("cp-%d disconnected %v hosts for their budget", i+1, k)
		}
		// Every host logged in again on the brokers left, and again on its own:
		// none was refused for its logins' rate (decision 0038).
		for _, code := range []string{"node_login_rate", "node_cooldown"} {
			if n := cp.Counter("mesh_broker_connections_refused_total", "reason="+code); n != 0 {
				t.Errorf("cp-%d refused %v logins of hosts with %s", i+1, n, code)
			}
		}
	}

	// Revoked through a control node that may not lead, hosts on any of the brokers
	// are found by their one connection each, closed, and stop on the signed notice.
	gone := hosts[:3]
	args := []string{"revoke"}
	for _, h := range gone {
		args = append(args, h.Name)
	}
	r := cp3.Ctl(args...)
	if r.Code != 0 {
		t.Fatalf("revoke: exit %d:\n%s", r.Code, r.Combined())
	}
	for _, h := range gone {
		if want := regexp.MustCompile(`(?m)^revoked ` + regexp.QuoteMeta(h.Name) + ` \(key U[A-Z0-9]{55}, enrolled [^;]+; 1 connection\(s\) open, closed now\)`); !want.MatchString(r.Stdout) {
			t.Errorf("revoke says %q, want a line matching %s", r.Stdout, want)
		}
		if code := h.Process().Wait(20 * time.Second); code != 6 {
			t.Errorf("%s's agent exited %d after its revocation, want 6", h.Name, code)
		}
	}
	counted("after the revocation", 20*time.Second, n-len(gone), cps...)
}

// threeControlNodes starts a mesh of three control nodes, each serving.
func threeControlNodes(t *testing.T, mesh string) []*harness.ControlPlane {
	t.Helper()
	cp1 := harness.NewControlPlane(t, bin, mesh)
	cp1.Serve()
	return []*harness.ControlPlane{cp1, joinControl(t, cp1, "cp-2"), joinControl(t, cp1, "cp-3")}
}

// until calls check every 200 ms until it says nothing is wrong (""), and fails the
// test with its last answer after limit.
func until(t *testing.T, what string, limit time.Duration, check func() string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		wrong := check()
		if wrong == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %s", what, limit, wrong)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// others returns cps without the i-th.
func others(cps []*harness.ControlPlane, i int) []*harness.ControlPlane {
	var out []*harness.ControlPlane
	for j, cp := range cps {
		if j != i {
			out = append(out, cp)
		}
	}
	return out
}

// fleetCounts says what is wrong with how the control nodes up see a fleet of n
// hosts, or "" when nothing is: their brokers hold n host connections between them,
// and each counts n in the mesh and shows n workers alive.
func fleetCounts(up []*harness.ControlPlane, n int) string {
	held := 0
	for _, cp := range up {
		held += int(cp.Counter("mesh_broker_host_connections"))
	}
	if held != n {
		return fmt.Sprintf("the brokers hold %d host connections", held)
	}
	for _, cp := range up {
		if c := int(cp.Counter("mesh_control_host_connections")); c != n {
			return fmt.Sprintf("%s counts %d host connections in the mesh", cp.Dir, c)
		}
		alive := 0
		for _, v := range cp.Nodes().Nodes {
			if v.State == api.StateAlive && v.Role == "worker" {
				alive++
			}
		}
		if alive != n {
			return fmt.Sprintf("%s shows %d workers alive", cp.Dir, alive)
		}
	}
	return ""
}

// TestHostsReturnToTheirFirstBroker: each host tries the brokers in an order rotated
// by its node id, so that a fleet spreads over the control nodes, and moves back to
// the first of them after a failover (meshhost run --return-home): a control node
// stopped and started again gets its hosts back; one removed for good is no one's
// first broker any more. Without the move back the twelve hosts of
// TestRollingRestartCountsEveryHostOnce sat 0, 0 and 12 midway through a rolling
// restart.
func TestHostsReturnToTheirFirstBroker(t *testing.T) {
	t.Parallel() // mostly waits (grace periods, timeouts): see TestMain
	cps := threeControlNodes(t, "home")
	cp1 := cps[0]

	const n = 9
	hosts := make([]*harness.Host, n)
	for i := range hosts {
		h := harness.NewHost(t, bin, fmt.Sprintf("app-%d", i))
		if r := h.Enrol(cp1.Token(h.Name)); r.Code != 0 {
			t.Fatalf("enrol %s: exit %d:\n%s", h.Name, r.Code, r.Combined())
		}
		h.Run("--return-home", "1s")
		hosts[i] = h
	}
	firsts := func(brokers int) (map[string]int, string) { return firstBrokers(hosts, brokers) }
	home := func(what string, up []*harness.ControlPlane, brokers int) {
		t.Helper()
		until(t, what, 30*time.Second, func() string { return onFirstBrokers(up, hosts, brokers) })
	}
	home("every host on its first broker", cps, len(cps))

	// Stop the control node with the most hosts; they fail over, and come back.
	want, _ := firsts(len(cps))
	busiest := 0
	for i, cp := range cps {
		if want[cp.Listen] > want[cps[busiest].Listen] {
			busiest = i
		}
	}
	p := cps[busiest].Process()
	p.Signal(syscall.SIGTERM)
	if code := p.Wait(20 * time.Second); code != 0 {
		t.Fatalf("cp-%d stopped with exit %d:\n%s", busiest+1, code, p.Output())
	}
	until(t, "the stopped node's hosts on the other two", 20*time.Second, func() string { return fleetCounts(others(cps, busiest), n) })
	cps[busiest].Serve()
	home(fmt.Sprintf("cp-%d back: its hosts with it again", busiest+1), cps, len(cps))

	// A control node removed for good is no one's first broker: its hosts go to the
	// first of the list the mesh signs without it, and stay there.
	// (The leader cannot be removed: meshctl asks to move the leadership first.)
	want, _ = firsts(len(cps))
	removed := -1
	for i, cp := range cps {
		if v := controlView(t, cp); v[fmt.Sprintf("cp-%d", i+1)].Raft == api.RaftLeader {
			continue
		}
		if removed < 0 || want[cp.Listen] > want[cps[removed].Listen] {
			removed = i
		}
	}
	rest := others(cps, removed)
	if r := rest[0].Ctl("control", "remove", fmt.Sprintf("cp-%d", removed+1)); r.Code != 0 {
		t.Fatalf("control remove cp-%d: exit %d:\n%s", removed+1, r.Code, r.Combined())
	}
	if code := cps[removed].Process().Wait(30 * time.Second); code != 6 {
		t.Fatalf("the removed node exited %d, want 6:\n%s", code, cps[removed].Process().Output())
	}
	home(fmt.Sprintf("cp-%d removed: every host on the first of the two left", removed+1), rest, len(rest))
}

// firstBrokers counts the hosts whose first broker each is, from the broker list in
// their applied state (the mesh's signed list) rotated by a hash of the node id,
// as the agent orders it; it says what is wrong while a host's list does not have
// brokers entries.
func firstBrokers(hosts []*harness.Host, brokers int) (map[string]int, string) {
	want := map[string]int{}
	for _, h := range hosts {
		applied, err := state.Load(h.State)
		if err != nil || len(applied.Brokers) != brokers {
			return nil, fmt.Sprintf("%s's applied state names brokers %v (%v), want %d", h.Name, applied.Brokers, err, brokers)
		}
		f := fnv.New32a()
		f.Write([]byte(h.Name))
		want[applied.Brokers[f.Sum32()%uint32(len(applied.Brokers))]]++
	}
	return want, ""
}

// onFirstBrokers says what is wrong until the brokers of up hold exactly the hosts
// whose first broker they are, the mesh's list having brokers entries, and count
// them all.
func onFirstBrokers(up []*harness.ControlPlane, hosts []*harness.Host, brokers int) string {
	want, wrong := firstBrokers(hosts, brokers)
	if wrong != "" {
		return wrong
	}
	if wrong := fleetCounts(up, len(hosts)); wrong != "" {
		return wrong
	}
	var got []string
	ok := true
	for _, cp := range up {
		held := int(cp.Counter("mesh_broker_host_connections"))
		ok = ok && held == want[cp.Listen]
		got = append(got, fmt.Sprintf("%s holds %d (its hosts: %d)", cp.Listen, held, want[cp.Listen]))
	}
	if ok {
		return ""
	}
	return strings.Join(got, ", ")
}

// TestHostsStartedAtOnceLandOnTheirFirstBroker: hosts enrolled and started at once,
// as a provisioning script does, are each admitted by the first broker of their
// order, a follower that has not applied their enrolment yet included: it waits a
// moment for the log rather than refuse a key the leader has just admitted. No
// broker refuses anyone, and no host needs --return-home to land where it should.
func TestHostsStartedAtOnceLandOnTheirFirstBroker(t *testing.T) {
	cps := threeControlNodes(t, "atonce")
	// Refusals of the control nodes' own joins (a join's connection closing as the
	// peers reload) are not the hosts'.
	before := make([]float64, len(cps))
	for i, cp := range cps {
		before[i] = cp.Counter("mesh_broker_connections_refused_total")
	}
	const n = 9
	hosts := make([]*harness.Host, n)
	for i := range hosts {
		h := harness.NewHost(t, bin, fmt.Sprintf("db-%d", i))
		if r := h.Enrol(cps[0].Token(h.Name)); r.Code != 0 {
			t.Fatalf("enrol %s: exit %d:\n%s", h.Name, r.Code, r.Combined())
		}
		h.Run("--return-home", "0")
		hosts[i] = h
	}
	until(t, "every host on its first broker", 20*time.Second, func() string { return onFirstBrokers(cps, hosts, len(cps)) })
	for i, cp := range cps {
		if r := cp.Counter("mesh_broker_connections_refused_total") - before[i]; r != 0 {
			t.Errorf("cp-%d refused %v connections:\n%s", i+1, r, cp.Process().Output())
		}
	}
	for _, h := range hosts {
		if out := h.Process().Output(); strings.Contains(out, "refused") {
			t.Errorf("%s was refused on its way:\n%s", h.Name, out)
		}
	}
}

// TestHostWhoseBrokersAreAllGone: a host switched off while the mesh had one control
// node, and that node replaced meanwhile, knows no broker that answers: it retries
// for ever. Given one address of the mesh as it is now (meshhost run --broker), it
// connects (the CA pin checked as for any broker), converges, and learns the signed
// list that replaces what it knew.
func TestHostWhoseBrokersAreAllGone(t *testing.T) {
	t.Parallel()
	cp1 := harness.NewControlPlane(t, bin, "stranded")
	cp1.Serve()
	h := harness.NewHost(t, bin, "web-1")
	if r := h.Enrol(cp1.Token(h.Name)); r.Code != 0 {
		t.Fatalf("enrol: exit %d:\n%s", r.Code, r.Combined())
	}
	p := h.Run()
	cp1.WaitConverged(h.Name, 0, 20*time.Second)
	p.Signal(syscall.SIGTERM)
	p.Wait(10 * time.Second)

	cp2, cp3 := joinControl(t, cp1, "cp-2"), joinControl(t, cp1, "cp-3")
	stop := cp1.Process()
	stop.Signal(syscall.SIGTERM)
	if code := stop.Wait(20 * time.Second); code != 0 {
		t.Fatalf("cp-1 stopped with exit %d", code)
	}
	until(t, "cp-1 removed through cp-2", 30*time.Second, func() string {
		if r := cp2.Ctl("control", "remove", "cp-1"); r.Code != 0 {
			return r.Combined()
		}
		return ""
	})

	// Without an address of the mesh as it is, the host finds nobody.
	p = h.Run()
	time.Sleep(3 * time.Second)
	if n, _ := cp2.Node(h.Name); n.State == api.StateAlive {
		t.Fatal("the host reached the mesh through brokers it does not know")
	}
	p.Signal(syscall.SIGTERM)
	p.Wait(10 * time.Second)

	h.Run("--broker", cp3.Listen)
	body := filepath.Join(t.TempDir(), "b.json")
	if err := os.WriteFile(body, []byte(`{"files":[{"path":"etc/app.conf","content":"found again\n"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := cp2.Ctl("declare", "--node", h.Name, "--file", body, "--wait", "30s"); r.Code != 0 {
		t.Fatalf("declare to the host given --broker: exit %d:\n%s", r.Code, r.Combined())
	}
	until(t, "the host keeps the mesh's signed list", 20*time.Second, func() string {
		applied, err := state.Load(h.State)
		if err != nil || len(applied.Brokers) != 2 || slices.Contains(applied.Brokers, cp1.Listen) {
			return fmt.Sprintf("its applied state names brokers %v (%v)", applied.Brokers, err)
		}
		return ""
	})
}

// TestControlNodesShownAsTheyAre: a control node stopped is shown offline by the
// others at once (its last heartbeat says it is stopping), so a rolling restart
// that waits for it to be alive again waits for its return; and after the leader is
// killed, the new leader shows the live nodes alive with their applied index
// (every control node hears the heartbeats, not the leader alone). Before, a
// stopped node stayed alive for about 5 s, and the new leader showed a live node
// "offline, never seen, applied index 0" for a few seconds.
func TestControlNodesShownAsTheyAre(t *testing.T) {
	cps := threeControlNodes(t, "shown")
	p := cps[2].Process()
	p.Signal(syscall.SIGTERM)
	if code := p.Wait(20 * time.Second); code != 0 {
		t.Fatalf("cp-3 stopped with exit %d", code)
	}
	if v := controlView(t, cps[0])["cp-3"]; v.State != api.StateOffline || v.LastSeen.IsZero() {
		t.Fatalf("cp-3 stopped and shown %s, last seen %v", v.State, v.LastSeen)
	} else if v.Hosts != nil {
		// Its broker stopped with it: the hosts it last held are the others' now.
		t.Fatalf("cp-3 stopped and shown holding %+v hosts", *v.Hosts)
	}
	cps[2].Serve()
	until(t, "cp-3 alive again", 20*time.Second, func() string {
		if v := controlView(t, cps[0])["cp-3"]; v.State != api.StateAlive {
			return "shown " + v.State
		}
		return ""
	})

	leader := -1
	view := controlView(t, cps[0])
	for i := range cps {
		if view[fmt.Sprintf("cp-%d", i+1)].Raft == api.RaftLeader {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatal("no leader shown")
	}
	cps[leader].Process().Kill()
	rest := others(cps, leader)
	until(t, "a new leader", 20*time.Second, func() string {
		for _, v := range controlView(t, rest[0]) {
			if v.Raft == api.RaftLeader && v.ID != fmt.Sprintf("cp-%d", leader+1) {
				return ""
			}
		}
		return "none yet"
	})
	// The moment it leads, the new leader shows the other live node alive, with
	// what it applied.
	for _, cp := range rest {
		view := controlView(t, cp)
		for i := range cps {
			id := fmt.Sprintf("cp-%d", i+1)
			if i == leader {
				continue
			}
			if v := view[id]; v.State != api.StateAlive || v.AppliedIndex == 0 || v.LastSeen.IsZero() {
				t.Errorf("%s shows %s %s, applied index %d, last seen %v", cp.Dir, id, v.State, v.AppliedIndex, v.LastSeen)
			}
		}
	}
}
