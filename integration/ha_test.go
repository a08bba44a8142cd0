package integration

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/datadir"
	"mesh/controlplane/pki"
	"mesh/integration/harness"
	"mesh/tokenfmt"
)

// joinControl mints a control token on ca, joins the new node and serves it (with
// serveArgs).
func joinControl(t *testing.T, ca *harness.ControlPlane, node string, serveArgs ...string) *harness.ControlPlane {
	t.Helper()
	tok, n := ca.ControlToken(node)
	r := n.Join(tok)
	if r.Code != 0 {
		t.Fatalf("join %s (exit %d):\n%s", node, r.Code, r.Combined())
	}
	n.Serve(serveArgs...)
	// Once it serves, the leader promotes it, keeping the voters odd: a second
	// control node waits for a third.
	harness.Eventually(t, 20*time.Second, "the voters settle after "+node+" serves", func() bool {
		members, voters := 0, 0
		for _, c := range n.Nodes().Control {
			if c.Raft == api.RaftRemoved {
				continue
			}
			members++
			if c.Raft == api.RaftVoter || c.Raft == api.RaftLeader {
				voters++
			}
		}
		return voters == members || voters == members-1 && members%2 == 0
	})
	// Its broker is listed to hosts (tokens, their lists, mesh.json) once the
	// leader has heard it serve, within a heartbeat or two (decision 0035); the
	// node's own mesh.json follows the list.
	harness.Eventually(t, 20*time.Second, node+" listed to hosts", func() bool {
		cfg, err := datadir.Dir(n.Dir).LoadConfig()
		return err == nil && slices.Contains(cfg.Brokers, n.Listen)
	})
	return n
}

func controlView(t *testing.T, cp *harness.ControlPlane) map[string]api.ControlView {
	t.Helper()
	out := map[string]api.ControlView{}
	for _, c := range cp.Nodes().Control {
		out[c.ID] = c
	}
	return out
}

// TestHighAvailability: three control nodes as separate processes. Joins are
// confirmed; every control node shows the same view; killing the leader hands over
// within seconds without losing an accepted declaration while hosts keep converging;
// with the bootstrap machine gone for good the others admit a new worker and a
// pre-minted control node; restarting everything loses nothing.
func TestHighAvailability(t *testing.T) {
	t.Parallel()
	cp1 := harness.NewControlPlane(t, bin, "ha")
	cp1.Serve()
	tok2, cp2 := cp1.ControlToken("cp-2")
	r := cp2.Join(tok2)
	if r.Code != 0 || !strings.Contains(r.Stdout, "stays a nonvoter") || !strings.Contains(r.Stdout, "NATS route up") {
		t.Fatalf("join cp-2 (exit %d):\n%s", r.Code, r.Combined())
	}
	if again := cp2.Join(tok2); again.Code != 0 || !strings.Contains(again.Stdout, "nothing to do") {
		t.Fatalf("re-running join on a joined node (exit %d):\n%s", again.Code, again.Combined())
	}
	cp2.Serve()
	cp3 := joinControl(t, cp1, "cp-3")
	cps := map[string]*harness.ControlPlane{"cp-1": cp1, "cp-2": cp2, "cp-3": cp3}

	harness.Eventually(t, 15*time.Second, "three voters, all alive, the same view everywhere", func() bool {
		for _, cp := range cps {
			v := controlView(t, cp)
			voters := 0
			for _, c := range v {
				if (c.Raft == api.RaftVoter || c.Raft == api.RaftLeader) && c.State == api.StateAlive {
					voters++
				}
			}
			if voters != 3 {
				return false
			}
		}
		return true
	})
	// A control token pre-minted now, on the CA holder, is used after it is gone.
	preTok, cp4 := cp1.ControlToken("cp-4")

	// A worker whose token lists all three brokers.
	web := harness.NewHost(t, bin, "web-1")
	wt := cp2.Token("web-1")
	parsed, _ := tokenfmt.Parse(wt, time.Now())
	if len(parsed.Brokers) != 3 {
		t.Fatalf("the token lists %d brokers, want 3", len(parsed.Brokers))
	}
	if r := web.Enrol(wt); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	agent := web.Run()
	body := filepath.Join(t.TempDir(), "b.json")
	declare := func(cp *harness.ControlPlane, content string) uint64 {
		t.Helper()
		writeFile(t, body, `{"files":[{"path":"state","content":"`+content+`"}]}`)
		r := cp.Ctl("declare", "--node", "web-1", "--file", body)
		m := declaredRE.FindStringSubmatch(r.Stdout)
		if r.Code != 0 || m == nil {
			t.Fatalf("declare via %s (exit %d): %s", filepath.Base(cp.Dir), r.Code, r.Combined())
		}
		v, _ := strconv.ParseUint(m[1], 10, 64)
		return v
	}
	v := declare(cp3, "one")
	cp1.WaitConverged("web-1", v, 20*time.Second)

	// Kill the leader.
	var leader string
	for id, c := range controlView(t, cp2) {
		if c.Raft == api.RaftLeader {
			leader = id
		}
	}
	if leader == "" {
		t.Fatal("no leader")
	}
	killedAt := time.Now()
	cps[leader].Process().Kill()
	var survivor *harness.ControlPlane
	for id, cp := range cps {
		if id != leader {
			survivor = cp
		}
	}
	harness.Eventually(t, 20*time.Second, "a new leader", func() bool {
		r := survivor.Ctl("nodes", "--json")
		return r.Code == 0 && strings.Contains(r.Stdout, `"raft_role": "leader"`)
	})
	t.Logf("leader %s killed; a new leader answered after %s", leader, time.Since(killedAt).Round(100*time.Millisecond))
	v = declare(survivor, "two")
	survivor.WaitConverged("web-1", v, 30*time.Second)
	if got, _ := web.ReadManaged("state"); got != "two" {
		t.Fatalf("state = %q after failover", got)
	}
	// Bring the old leader back, then remove the bootstrap machine for good.
	cps[leader].Serve()
	cp1.Process().Kill()
	harness.Eventually(t, 20*time.Second, "cp-1 removed", func() bool {
		return cp2.Ctl("control", "remove", "cp-1").Code == 0
	})
	delete(cps, "cp-1")
	if r := cp2.Ctl("token", "--role", "control", "--node", "cp-9", "--addr", "127.0.0.1:1"); r.Code != 4 || !strings.Contains(r.Stderr, "no running control node says it holds them") {
		t.Fatalf("a control token was minted away from the CA holder (exit %d): %s", r.Code, r.Combined())
	}
	web2 := harness.NewHost(t, bin, "web-2")
	if r := web2.Enrol(cp3.Token("web-2")); r.Code != 0 {
		t.Fatalf("a worker could not enrol without the bootstrap machine: %s", r.Combined())
	}
	if r := cp4.Join(preTok); r.Code != 0 {
		t.Fatalf("the pre-minted control token did not join without the bootstrap machine (exit %d):\n%s", r.Code, r.Combined())
	}
	cp4.Serve()
	cps["cp-4"] = cp4
	v = declare(cp4, "three")
	cp4.WaitConverged("web-1", v, 30*time.Second)

	// Restart everything: nothing is lost.
	for _, cp := range cps {
		cp.Process().Kill()
	}
	agent.Kill()
	for _, cp := range cps {
		cp.StartServe()
	}
	for _, cp := range cps {
		cp.WaitServing()
	}
	n, ok := cp3.Node("web-1")
	if !ok || n.Declared != v {
		t.Fatalf("after restarting everything web-1 = %+v", n)
	}
	if _, ok := cp2.Node("web-2"); !ok {
		t.Fatal("web-2 lost in the restart")
	}
	web.Run()
	cp2.WaitConverged("web-1", v, 30*time.Second)

	scanKeys(t, cp1, cps, []*harness.Host{web, web2}, []string{wt, preTok, tok2})
}

// scanKeys checks that keys stay where docs/security.md says: the CA key only in the
// bootstrap machine's ca-key.pem; the signing key in clear only in control nodes'
// signing-key.pem; token secrets nowhere; a worker holds no TLS identity and no
// signing key. Every file each role wrote is read, the Raft logs and snapshots
// included, for every encoding a key could leak in.
func scanKeys(t *testing.T, caHolder *harness.ControlPlane, cps map[string]*harness.ControlPlane, hosts []*harness.Host, tokens []string) {
	t.Helper()
	caKey, err := pki.ParseKeyPEM(mustRead(t, filepath.Join(caHolder.Dir, "ca-key.pem")))
	if err != nil {
		t.Fatal(err)
	}
	signing, err := datadir.Dir(caHolder.Dir).LoadSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	caDER, _ := x509.MarshalPKCS8PrivateKey(caKey)
	caScalar := caKey.(*ecdsa.PrivateKey).D.FillBytes(make([]byte, 32))
	sigDER, _ := x509.MarshalPKCS8PrivateKey(signing)
	needles := map[string][][]byte{
		"the CA private key": encodings(caScalar, caDER, mustRead(t, filepath.Join(caHolder.Dir, "ca-key.pem"))),
		"the signing key":    encodings(signing.Seed(), sigDER, mustRead(t, filepath.Join(caHolder.Dir, "signing-key.pem"))),
	}
	for i, tok := range tokens {
		p, err := tokenfmt.Parse(tok, time.Now().Add(-time.Hour))
		if err != nil && p.Node == "" {
			t.Fatal(err)
		}
		needles[fmt.Sprintf("token secret %d", i)] = encodings(p.Secret[:], nil, nil)
	}
	allowed := func(needle, path string) bool {
		switch needle {
		case "the CA private key":
			return path == filepath.Join(caHolder.Dir, "ca-key.pem")
		case "the signing key":
			return filepath.Base(path) == "signing-key.pem"
		}
		return false
	}
	dirs := []string{caHolder.Dir}
	for _, cp := range cps {
		dirs = append(dirs, cp.Dir)
	}
	for _, h := range hosts {
		dirs = append(dirs, h.State)
	}
	files, snapshots, found := 0, 0, map[string]int{}
	for _, dir := range dirs {
		filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
			if err != nil || fi.IsDir() {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			files++
			if filepath.Base(path) == "state.bin" {
				snapshots++
			}
			for name, forms := range needles {
				for _, form := range forms {
					if bytes.Contains(data, form) {
						found[name]++
						if !allowed(name, path) {
							t.Errorf("%s found in %s", name, path)
						}
						break
					}
				}
			}
			return nil
		})
	}
	if snapshots == 0 {
		t.Error("no Raft snapshot was written: the scan covered the log only")
	}
	// The scan must see the copies that are allowed, or it proves nothing.
	if found["the CA private key"] != 1 {
		t.Errorf("the CA key was found in %d files, want exactly its own ca-key.pem", found["the CA private key"])
	}
	if found["the signing key"] < len(cps)+1 {
		t.Errorf("the signing key was found in %d files; each control node should hold its signing-key.pem", found["the signing key"])
	}
	for _, h := range hosts {
		for _, f := range []string{"tls.pem", "tls-key.pem", "signing-key.pem", "ca-key.pem"} {
			if _, err := os.Stat(filepath.Join(h.State, f)); err == nil {
				t.Errorf("worker %s holds %s", h.Name, f)
			}
		}
	}
	t.Logf("scanned %d files (%d Raft snapshots) in %d directories for %d secrets", files, snapshots, len(dirs), len(needles))
}

// encodings are the forms a secret could leak in: raw, hex, base64 (standard and URL,
// with and without padding), the DER key in the same, and each line of its PEM.
func encodings(raw, der, pemFile []byte) [][]byte {
	var out [][]byte
	for _, b := range [][]byte{raw, der} {
		if len(b) == 0 {
			continue
		}
		out = append(out, b, []byte(hex.EncodeToString(b)),
			[]byte(base64.StdEncoding.EncodeToString(b)), []byte(base64.RawStdEncoding.EncodeToString(b)),
			[]byte(base64.URLEncoding.EncodeToString(b)), []byte(base64.RawURLEncoding.EncodeToString(b)))
	}
	for _, line := range strings.Split(string(pemFile), "\n") {
		if len(line) >= 40 && !strings.HasPrefix(line, "-----") {
			out = append(out, []byte(line))
		}
	}
	return out
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRecoverLostQuorum: two of three voters are lost for good. The survivor cannot
// lead alone; with a peers file listing only itself it recovers the configuration at
// start, keeps every node and declaration, and admits again (docs/operations.md).
func TestRecoverLostQuorum(t *testing.T) {
	cp1 := harness.NewControlPlane(t, bin, "quorum")
	cp1.Serve()
	cp2 := joinControl(t, cp1, "cp-2")
	cp3 := joinControl(t, cp1, "cp-3")
	web := harness.NewHost(t, bin, "web-1")
	if r := web.Enrol(cp1.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	body := filepath.Join(t.TempDir(), "b.json")
	writeFile(t, body, `{"files":[{"path":"f","content":"kept"}]}`)
	if r := cp1.Ctl("declare", "--node", "web-1", "--file", body); r.Code != 0 {
		t.Fatalf("declare: %s", r.Combined())
	}
	cp2.Process().Kill()
	cp3.Process().Kill()
	harness.Eventually(t, 20*time.Second, "the survivor loses leadership", func() bool {
		return cp1.Ctl("nodes", "--leader-wait", "0").Code == 3
	})
	// Without a quorum no election can succeed: meshctl waits as long as it was
	// told to, then says so.
	start := time.Now()
	if r := cp1.Ctl("nodes", "--leader-wait", "1s"); r.Code != 3 || !strings.Contains(r.Stderr, "no control node answered") || !strings.Contains(r.Stderr, "waited 1s") || time.Since(start) < time.Second {
		t.Fatalf("nodes without a quorum: exit %d after %s: %s", r.Code, time.Since(start), r.Combined())
	}
	// No leader known: the node is alive but cannot serve, and says so.
	if code := httpStatus("http://" + cp1.Metrics + "/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz without a quorum: %d, want 503", code)
	}
	if code := httpStatus("http://" + cp1.Metrics + "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz without a quorum: %d, want 200", code)
	}
	cp1.Process().Kill()
	peers := `[{"id":"cp-1","address":"` + cp1.Raft + `","non_voter":false}]`
	writeFile(t, filepath.Join(cp1.Dir, "raft", "peers.json"), peers)
	cp1.Serve()
	if n, ok := cp1.Node("web-1"); !ok || n.Declared != 1 {
		t.Fatalf("after recovery web-1 = %+v (found %v)", n, ok)
	}
	if code := httpStatus("http://" + cp1.Metrics + "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz after recovery: %d, want 200", code)
	}
	if _, err := os.Stat(filepath.Join(cp1.Dir, "raft", "peers.json.applied")); err != nil {
		t.Fatalf("the peers file was not marked applied: %v", err)
	}
	for _, gone := range []string{"cp-2", "cp-3"} {
		if r := cp1.Ctl("control", "remove", gone); r.Code != 0 {
			t.Fatalf("remove %s: %s", gone, r.Combined())
		}
	}
	if r := harness.NewHost(t, bin, "web-2").Enrol(cp1.Token("web-2")); r.Code != 0 {
		t.Fatalf("enrol after recovery: %s", r.Combined())
	}
}

// TestJoinRefusals: each wrong token for a join is refused with its own message, and
// a control token cannot make a worker.
func TestJoinRefusals(t *testing.T) {
	cp1 := harness.NewControlPlane(t, bin, "joinref")
	cp1.Serve()
	_, stranger := cp1.ControlToken("cp-9") // only to get a fresh directory and ports
	if r := stranger.Join(cp1.Token("web-1")); r.Code != 4 || !strings.Contains(r.Stderr, "workers enrol with meshhost enrol") {
		t.Fatalf("join with a worker token (exit %d): %s", r.Code, r.Combined())
	}
	tok, cp2 := cp1.ControlToken("cp-2")
	if r := harness.NewHost(t, bin, "cp-2").Enrol(tok); r.Code != hostExitToken || !strings.Contains(r.Stderr, "meshctl join") {
		t.Fatalf("meshhost enrol with a control token (exit %d): %s", r.Code, r.Combined())
	}
	if r := cp2.Join(tok); r.Code != 0 {
		t.Fatalf("join: %s", r.Combined())
	}
	_, other := cp1.ControlToken("cp-3")
	if r := other.Join(tok); r.Code != 4 || !strings.Contains(r.Stderr, "token_other_node") && !strings.Contains(r.Stderr, "token_used") {
		t.Fatalf("a used control token on another machine (exit %d): %s", r.Code, r.Combined())
	} else if !strings.Contains(r.Stdout, "removed the keys of this join") {
		t.Errorf("the refused join does not say it removed its keys:\n%s", r.Stdout)
	}
	// Refused for good, the join leaves no key behind (it held a seed nobody will use),
	// nor the directory it made, with its lock alone in it (a docs walkthrough).
	if _, err := os.Stat(filepath.Join(other.Dir, datadir.JoinPendingFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a join refused for good left %s: %v", datadir.JoinPendingFile, err)
	}
	if entries, err := os.ReadDir(other.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a join refused for good left the directory it made: %v, %v", entries, err)
	}
}

// TestHungControlNodeLeftByItsHosts: a control node whose process stops reading
// (SIGSTOP: its machine still answers TCP, so the kernel's keepalive sees nothing
// wrong) is noticed by the agent's pings and left for another broker. The other
// brokers close their routes to it within seconds, so the API it served as leader
// is no longer routed to it: declarations sent through a running follower are
// answered at the first try, and reach the host. Continued, the node catches up.
// The agent pings every second (`--broker-ping 1s`) so that the test waits
// seconds, not the default's 40–60.
func TestHungControlNodeLeftByItsHosts(t *testing.T) {
	t.Parallel() // mostly waits (grace periods, timeouts): see TestMain
	cp1 := harness.NewControlPlane(t, bin, "hung")
	cp1.Serve()
	cps := []*harness.ControlPlane{cp1, joinControl(t, cp1, "cp-2"), joinControl(t, cp1, "cp-3")}
	ids := map[*harness.ControlPlane]string{cps[0]: "cp-1", cps[1]: "cp-2", cps[2]: "cp-3"}
	leaderSeenBy := func(cp *harness.ControlPlane) string {
		for id, c := range controlView(t, cp) {
			if c.Raft == api.RaftLeader {
				return id
			}
		}
		return ""
	}
	web := harness.NewHost(t, bin, "web-1")
	if r := web.Enrol(cp1.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	agent := web.Run("--broker-ping", "1s")
	body := filepath.Join(t.TempDir(), "b.json")
	declare := func(cp *harness.ControlPlane, content string, extra ...string) (uint64, bool) {
		writeFile(t, body, `{"files":[{"path":"state","content":"`+content+`"}]}`)
		r := cp.Ctl(append([]string{"declare", "--node", "web-1", "--file", body}, extra...)...)
		m := declaredRE.FindStringSubmatch(r.Stdout)
		if r.Code != 0 || m == nil {
			t.Logf("declare via %s (exit %d): %s", ids[cp], r.Code, r.Combined())
			return 0, false
		}
		v, _ := strconv.ParseUint(m[1], 10, 64)
		return v, true
	}
	v1, ok := declare(cp1, "before")
	if !ok {
		t.Fatal("the first declaration was refused")
	}
	cp1.WaitConverged("web-1", v1, 20*time.Second)

	// The node the agent is connected to is the one that hangs.
	connectedTo := func() *harness.ControlPlane {
		out := agent.Output()
		i := strings.LastIndex(out, `msg="connected to the mesh"`)
		if i < 0 {
			return nil
		}
		line, _, _ := strings.Cut(out[i:], "\n")
		for _, cp := range cps {
			if strings.Contains(line, "broker=tls://"+cp.Listen) {
				return cp
			}
		}
		t.Fatalf("the agent is connected to no control node of the test: %s", line)
		return nil
	}
	hung := connectedTo()
	if hung == nil {
		t.Fatalf("the agent never said where it connected:\n%s", agent.Output())
	}
	wasLeader := leaderSeenBy(hung) == ids[hung]
	disconnects := strings.Count(agent.Output(), "disconnected from the mesh")
	hung.Process().Signal(syscall.SIGSTOP)
	// Continued before the harness stops it: a stopped process keeps a SIGTERM pending.
	t.Cleanup(func() { hung.Process().Signal(syscall.SIGCONT) })
	stopped := time.Now()
	harness.Eventually(t, 10*time.Second, "the agent notices the stopped broker", func() bool {
		return strings.Count(agent.Output(), "disconnected from the mesh") > disconnects
	})
	t.Logf("the agent left %s %s after it stopped (pings every 1s, two unanswered); it was the leader: %t",
		ids[hung], time.Since(stopped).Round(100*time.Millisecond), wasLeader)

	// The running two have a leader; the other one is a follower, whose broker
	// holds no API subscription of its own and routes each request to one.
	var live []*harness.ControlPlane
	for _, cp := range cps {
		if cp != hung {
			live = append(live, cp)
		}
	}
	var leader string
	harness.Eventually(t, 20*time.Second, "a leader among the running control nodes", func() bool {
		leader = leaderSeenBy(live[0])
		return leader != "" && leader != ids[hung] && leaderSeenBy(live[1]) == leader
	})
	follower := live[0]
	if ids[follower] == leader {
		follower = live[1]
	}
	// Past the routes' window (3 unanswered pings 2 s apart, the first within 2 s),
	// every declaration through the follower is answered at the first try. Before,
	// the stopped leader's subscription stayed routed for a minute, and a request
	// went to it or to the new leader at random.
	time.Sleep(time.Until(stopped.Add(9 * time.Second)))
	var v2 uint64
	for i := range 3 {
		if v2, ok = declare(follower, fmt.Sprintf("during %d", i), "--timeout", "5s"); !ok {
			t.Fatalf("declaration %d through the follower %s, %s after %s stopped, was not answered", i, ids[follower], time.Since(stopped).Round(100*time.Millisecond), ids[hung])
		}
	}
	follower.WaitConverged("web-1", v2, 30*time.Second)
	if got, _ := web.ReadManaged("state"); got != "during 2" {
		t.Fatalf("state = %q after v%d converged\nagent:\n%s", got, v2, agent.Output())
	}
	if now := connectedTo(); now == hung || now == nil {
		t.Fatalf("the agent converged without leaving the stopped node:\n%s", agent.Output())
	}

	// Continued, the node catches up: it shows what the others decided.
	hung.Process().Signal(syscall.SIGCONT)
	harness.Eventually(t, 30*time.Second, ids[hung]+" shows web-1 on v"+strconv.FormatUint(v2, 10)+" after it continues", func() bool {
		n, ok := hung.Node("web-1")
		return ok && n.Applied != nil && *n.Applied == v2 && n.Converged
	})
	if agent.Exited() {
		t.Fatalf("the agent exited:\n%s", agent.Output())
	}
}

// TestAMemberHoldingAnotherRaftConfigurationIsGivenTheLeaders: a member that holds
// another Raft configuration than the leader's while it follows its log (here a
// survivor of a recovery not given the peers file; a walkthrough met one that took
// an older snapshot's over newer entries) is given the leader's within seconds:
// the leader appends its configuration again. Before, the member kept its own
// until the next membership change, and voted (or refused to vote) by it: a
// rejoined voter that held one in which it did not vote left the control plane
// without a leader, two of three voters up.
func TestAMemberHoldingAnotherRaftConfigurationIsGivenTheLeaders(t *testing.T) {
	t.Parallel()
	cp1 := harness.NewControlPlane(t, bin, "spreadconf")
	cp1.Serve()
	cp2 := joinControl(t, cp1, "cp-2")
	cp3 := joinControl(t, cp1, "cp-3")
	// cp-2 stops last, so that its log holds all of cp-1's: the recovered leader
	// then sends it entries, not a snapshot (whose configuration it would take
	// without a spread: a review).
	for _, cp := range []*harness.ControlPlane{cp3, cp1, cp2} {
		cp.Process().Signal(syscall.SIGTERM)
		if code := cp.Process().Wait(30 * time.Second); code != 0 {
			t.Fatalf("stop: exit %d\n%s", code, cp.Process().Output())
		}
	}
	// cp-3 is lost; the recovery gives cp-1 alone the peers file, which keeps
	// cp-2 a nonvoter: cp-1 leads alone, and cp-2 follows it holding the three
	// voters of before.
	writeFile(t, filepath.Join(cp1.Dir, "raft", "peers.json"),
		`[{"id":"cp-1","address":"`+cp1.Raft+`","non_voter":false},{"id":"cp-2","address":"`+cp2.Raft+`","non_voter":true}]`)
	cp1.Serve()
	cp2.Serve()
	want := []api.RaftMember{{ID: "cp-1", Address: cp1.Raft, Voter: true}, {ID: "cp-2", Address: cp2.Raft, Voter: false}}
	var last string
	harness.Eventually(t, 60*time.Second, "cp-2 holds the leader's Raft configuration", func() bool {
		r := cp1.Ctl("control", "status", "--json")
		var out struct {
			Answered []api.ControlStatus `json:"answered"`
		}
		if json.Unmarshal([]byte(r.Stdout), &out) != nil {
			return false
		}
		for _, a := range out.Answered {
			if a.Node == "cp-2" {
				members := slices.Clone(a.Members)
				slices.SortFunc(members, func(x, y api.RaftMember) int { return strings.Compare(x.ID, y.ID) })
				last = fmt.Sprint(members)
				return slices.Equal(members, want)
			}
		}
		return false
	})
	if !strings.Contains(cp1.Process().Output(), "the leader appends its configuration again") {
		t.Errorf("the leader does not say it gave cp-2 its configuration (cp-2 held %s):\n%s", last, cp1.Process().Output())
	}
}
