package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/host/identity"
	"mesh/integration/harness"
	"mesh/tokenfmt"
)

// Exit codes of meshhost (host/cmd/meshhost).
const (
	hostExitToken       = 3
	hostExitSubstituted = 4
	hostExitIdentity    = 5
	hostExitRevoked     = 6
	hostExitInterrupted = 9
)

// TestStory drives the built binaries through the whole story of one control node:
// bootstrap (and its resume), serve, token, enrol (stdin, file, environment), run,
// declare, converge, revoke.
func TestStory(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "story")
	pin := readConfig(t, cp.Dir)["ca_pin"]

	again := cp.Ctl("bootstrap", "--mesh", "story", "--listen", cp.Listen, "--raft-listen", cp.Raft, "--cluster-listen", cp.Cluster)
	// Run again, it says what the first run said: the pin and what to keep safe.
	if again.Code != 0 || !strings.Contains(again.Stdout, "already bootstrapped") || !strings.Contains(again.Stdout, fmt.Sprint("CA pin:            sha256:", pin)) ||
		!strings.Contains(again.Stdout, "keep safe offline") {
		t.Fatalf("re-running bootstrap did not resume cleanly (%d):\n%s", again.Code, again.Combined())
	}
	var rerun struct {
		CAPin               string `json:"ca_pin"`
		AlreadyBootstrapped bool   `json:"already_bootstrapped"`
	}
	again = cp.Ctl("bootstrap", "--mesh", "story", "--listen", cp.Listen, "--raft-listen", cp.Raft, "--cluster-listen", cp.Cluster, "--json")
	if err := json.Unmarshal([]byte(again.Stdout), &rerun); again.Code != 0 || err != nil || !rerun.AlreadyBootstrapped || rerun.CAPin != pin.(string) {
		t.Fatalf("bootstrap --json run again: %+v, %v (%d)\n%s", rerun, err, again.Code, again.Combined())
	}
	if got := readConfig(t, cp.Dir)["ca_pin"]; got != pin {
		t.Fatalf("re-running bootstrap changed the CA pin: %s -> %s", pin, got)
	}
	// The dry run binds its addresses to check them: free ones, above the ports
	// only root may bind.
	free := harness.FreePorts(t, 3)
	dry := harness.Run(t, "", nil, bin.Meshctl, "bootstrap", "--mesh", "other", "--listen", fmt.Sprintf("127.0.0.1:%d", free[0]),
		"--raft-listen", fmt.Sprintf("127.0.0.1:%d", free[1]), "--cluster-listen", fmt.Sprintf("127.0.0.1:%d", free[2]), "--data", filepath.Join(t.TempDir(), "x"), "--dry-run")
	if dry.Code != 0 || !strings.Contains(dry.Stdout, "dry run: nothing was changed") || !strings.Contains(dry.Stdout, "generate the mesh CA") {
		t.Fatalf("--dry-run: (%d)\n%s", dry.Code, dry.Combined())
	}

	cp.Serve()

	// Three machines, the token delivered three ways.
	web1 := harness.NewHost(t, bin, "web-1")
	tok1 := cp.Token("web-1", "--ttl", "15m")
	if strings.Count(strings.TrimSpace(tok1), "\n") != 0 || !strings.HasPrefix(tok1, "mesh1_story_") {
		t.Fatalf("meshctl token printed more than the token: %q", tok1)
	}
	if r := web1.Enrol(tok1); r.Code != 0 {
		t.Fatalf("enrol from stdin (%d):\n%s", r.Code, r.Combined())
	} else if !strings.Contains(r.Stdout, "checked against the pinned CA") || !strings.Contains(r.Stdout, "the mesh holds this node's key") {
		t.Fatalf("enrol did not print its steps:\n%s", r.Stdout)
	}
	web2 := harness.NewHost(t, bin, "web-2")
	tokFile := filepath.Join(t.TempDir(), "token.txt")
	if err := os.WriteFile(tokFile, []byte(cp.Token("web-2")), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := harness.Run(t, "", nil, bin.Meshhost, "enrol", "--state", web2.State, "--token-file", tokFile); r.Code != 0 {
		t.Fatalf("enrol from --token-file (%d):\n%s", r.Code, r.Combined())
	}
	web3 := harness.NewHost(t, bin, "web-3")
	if r := harness.Run(t, "", []string{"MESH_TOKEN=" + cp.Token("web-3")}, bin.Meshhost, "enrol", "--state", web3.State); r.Code != 0 {
		t.Fatalf("enrol from MESH_TOKEN (%d):\n%s", r.Code, r.Combined())
	}
	for _, h := range []*harness.Host{web1, web2, web3} {
		if fi, err := os.Stat(identity.Path(h.State)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: identity file missing or not 0600: %v %v", h.Name, fi.Mode(), err)
		}
	}

	agent := web1.Run()
	bodyFile := filepath.Join(t.TempDir(), "web.json")
	writeFile(t, bodyFile, `{"files":[{"path":"etc/app.conf","content":"listen 8080\n","mode":"0640"},{"path":"bin/blob","content_base64":"AAEC/w==","mode":"0755"}]}`)
	if r := cp.Ctl("declare", "--node", "web-1", "--file", bodyFile); r.Code != 0 || !strings.Contains(r.Stdout, "declared web-1 v1") {
		t.Fatalf("declare (%d):\n%s", r.Code, r.Combined())
	}
	cp.WaitConverged("web-1", 1, 20*time.Second)
	if got, err := web1.ReadManaged("etc/app.conf"); err != nil || got != "listen 8080\n" {
		t.Fatalf("etc/app.conf = %q, %v", got, err)
	}
	if got, _ := web1.ReadManaged("bin/blob"); got != "\x00\x01\x02\xff" {
		t.Fatalf("bin/blob = %q", got)
	}
	if fi, _ := os.Stat(filepath.Join(web1.Root, "etc", "app.conf")); fi.Mode().Perm() != 0o640 {
		t.Fatalf("etc/app.conf mode %v, want 0640", fi.Mode().Perm())
	}
	n, _ := cp.Node("web-1")
	if n.State != "alive" || n.Declared != 1 || !n.Converged {
		t.Fatalf("nodes shows %+v", n)
	}
	table := cp.Ctl("nodes")
	if !strings.Contains(table.Stdout, "web-1") || !strings.Contains(table.Stdout, "alive") {
		t.Fatalf("nodes table:\n%s", table.Stdout)
	}

	// A second declaration replaces the whole state: the file no longer declared goes.
	writeFile(t, bodyFile, `{"files":[{"path":"etc/app.conf","content":"listen 9090\n"}]}`)
	if r := cp.Ctl("declare", "--node", "web-1", "--file", bodyFile); r.Code != 0 {
		t.Fatalf("declare v2 (%d):\n%s", r.Code, r.Combined())
	}
	cp.WaitConverged("web-1", 2, 20*time.Second)
	if _, err := web1.ReadManaged("bin/blob"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("bin/blob should be removed once no longer declared: %v", err)
	}

	r := cp.Ctl("revoke", "web-1")
	if r.Code != 0 || !strings.Contains(r.Stdout, "revoked web-1") {
		t.Fatalf("revoke (%d):\n%s", r.Code, r.Combined())
	}
	if code := agent.Wait(10 * time.Second); code != hostExitRevoked {
		t.Fatalf("agent exit code after revocation = %d, want %d; output:\n%s", code, hostExitRevoked, agent.Output())
	}
	if out := agent.Output(); !strings.Contains(out, "revoked") || !strings.Contains(out, "new token") {
		t.Fatalf("the agent did not say it was revoked and needs a new token:\n%s", out)
	}
	if n, _ := cp.Node("web-1"); n.State != "revoked" {
		t.Fatalf("web-1 state %q after revoke", n.State)
	}
	// Restarted, the revoked agent is refused and stops on its own.
	again2 := web1.Run()
	if code := again2.Wait(30 * time.Second); code != hostExitRevoked {
		t.Fatalf("restarted revoked agent: exit %d, want %d:\n%s", code, hostExitRevoked, again2.Output())
	}
}

// TestServeRestartLosesNothing kills the control plane with SIGKILL and checks that no
// token, node or declaration was lost.
func TestServeRestartLosesNothing(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "durable")
	serve := cp.Serve()
	web1 := harness.NewHost(t, bin, "web-1")
	if r := web1.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	pending := cp.Token("web-2") // minted before the crash, used after it
	body := filepath.Join(t.TempDir(), "b.json")
	writeFile(t, body, `{"files":[{"path":"a","content":"1"}]}`)
	if r := cp.Ctl("declare", "--node", "web-1", "--file", body); r.Code != 0 {
		t.Fatalf("declare: %s", r.Combined())
	}

	serve.Kill()
	cp.Serve()

	n, ok := cp.Node("web-1")
	if !ok || n.Declared != 1 {
		t.Fatalf("after restart web-1 = %+v (found %v), want declared v1", n, ok)
	}
	web2 := harness.NewHost(t, bin, "web-2")
	if r := web2.Enrol(pending); r.Code != 0 {
		t.Fatalf("a token minted before the crash no longer works (%d):\n%s", r.Code, r.Combined())
	}
	web1.Run()
	cp.WaitConverged("web-1", 1, 20*time.Second)
	// Consumed tokens stay consumed across the restart.
	if r := harness.NewHost(t, bin, "web-2b").Enrol(pending); r.Code != hostExitToken || !strings.Contains(r.Combined(), "token_used") {
		t.Fatalf("a token used before the crash enrolled again (%d):\n%s", r.Code, r.Combined())
	}
}

// TestImpostorRefusedBeforeAnyCredential: a broker under another CA at the token's
// address receives no application byte and no credential; the message says retrying
// will not help; nothing is saved.
func TestImpostorRefusedBeforeAnyCredential(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "pinned")
	cp.Serve()
	imp := harness.StartImpostor(t, "127.0.0.1:0")
	tok, err := tokenfmt.Parse(cp.Token("web-1"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tok.Brokers = mustAddrs(t, imp.Addr())
	h := harness.NewHost(t, bin, "web-1")
	r := h.Enrol(tok.Encode())
	if r.Code != hostExitSubstituted {
		t.Fatalf("exit %d, want %d (substituted):\n%s", r.Code, hostExitSubstituted, r.Combined())
	}
	if !strings.Contains(r.Combined(), "retrying will not help") || !strings.Contains(r.Combined(), "substituted") {
		t.Fatalf("the message does not say the mesh was substituted and retrying will not help:\n%s", r.Combined())
	}
	if b := imp.AppBytes(t); b != 0 {
		t.Fatalf("the impostor received %d application bytes, want 0", b)
	}
	if c := imp.CredentialsSeen(); c != 0 {
		t.Fatalf("the impostor saw %d credential presentations, want 0", c)
	}
	if _, err := identity.Load(h.State); !errors.Is(err, identity.ErrNotEnrolled) {
		t.Fatalf("an identity was saved after refusing an impostor: %v", err)
	}
	// The genuine token still works afterwards: nothing was consumed.
	tok.Brokers = mustAddrs(t, cp.Listen)
	if r := h.Enrol(tok.Encode()); r.Code != 0 {
		t.Fatalf("enrol against the real mesh after the impostor (%d):\n%s", r.Code, r.Combined())
	}
}

// TestRunningAgentRefusesImpostor: an enrolled host's agent is running when its
// broker's address starts leading to a broker under another CA (the path is taken
// over). The agent reconnects there and refuses it inside the TLS handshake: the
// impostor receives no application byte and no credential (the agent signs the
// server's nonce only after the pin check). Once the path is back, the agent
// reconnects and converges.
func TestRunningAgentRefusesImpostor(t *testing.T) {
	cp, proxy := harness.NewControlPlaneBehindProxy(t, bin, "runpinned")
	cp.Serve()
	h := harness.NewHost(t, bin, "web-1")
	if r := h.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	agent := h.Run()
	body := filepath.Join(t.TempDir(), "b.json")
	writeFile(t, body, `{"files":[{"path":"f","content":"one"}]}`)
	cp.Ctl("declare", "--node", "web-1", "--file", body)
	cp.WaitConverged("web-1", 1, 20*time.Second)

	imp := harness.StartImpostor(t, "127.0.0.1:0")
	proxy.SetTarget(imp.Addr())
	proxy.ResetAll()
	agent.WaitOutput(t, "not the mesh's: refusing it", 30*time.Second)
	// It retries, and says it does: "retrying will not help", enrol's words for a
	// mesh substituted, was logged beside "trying again".
	if strings.Contains(agent.Output(), "retrying will not help") {
		t.Errorf("the running agent says retrying will not help as it retries:\n%s", agent.Output())
	}
	if b := imp.AppBytes(t); b != 0 {
		t.Fatalf("the impostor received %d application bytes from the running agent, want 0", b)
	}
	if c := imp.CredentialsSeen(); c != 0 {
		t.Fatalf("the impostor saw %d credential presentations, want 0", c)
	}

	proxy.SetTarget(cp.Listen)
	writeFile(t, body, `{"files":[{"path":"f","content":"two"}]}`)
	cp.Ctl("declare", "--node", "web-1", "--file", body)
	cp.WaitConverged("web-1", 2, 30*time.Second)
	if got, _ := h.ReadManaged("f"); got != "two" {
		t.Fatalf("after the path came back f = %q\n%s", got, agent.Output())
	}
}

// TestTokenRefusals: expired, truncated, reused and other-node tokens are each refused
// with their own message, and nothing is recorded.
func TestTokenRefusals(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "tokens")
	cp.Serve()

	type refusal struct{ name, token, want string }
	var cases []refusal

	expired := cp.Token("exp-1", "--ttl", "1s")
	time.Sleep(2 * time.Second)
	cases = append(cases, refusal{"expired", expired, "token_expired"})

	full := cp.Token("trunc-1")
	cases = append(cases, refusal{"truncated", full[:len(full)/2], "truncated"})

	used := cp.Token("used-1")
	if r := harness.NewHost(t, bin, "used-1").Enrol(used); r.Code != 0 {
		t.Fatalf("first use: %s", r.Combined())
	}
	cases = append(cases, refusal{"reused", used, "token_used"})

	other, err := tokenfmt.Parse(cp.Token("meant-1"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	other.Node = "taker-1" // a valid checksum over a node id the mesh did not mint it for
	cases = append(cases, refusal{"other node", other.Encode(), "token_other_node"})

	seen := map[string]string{}
	for _, c := range cases {
		h := harness.NewHost(t, bin, "h-"+strings.ReplaceAll(c.name, " ", "-"))
		r := h.Enrol(c.token)
		if r.Code != hostExitToken {
			t.Errorf("%s: exit %d, want %d:\n%s", c.name, r.Code, hostExitToken, r.Combined())
		}
		if !strings.Contains(r.Combined(), c.want) {
			t.Errorf("%s: message lacks %q:\n%s", c.name, c.want, r.Combined())
		}
		if _, err := identity.Load(h.State); !errors.Is(err, identity.ErrNotEnrolled) {
			t.Errorf("%s: an identity was saved: %v", c.name, err)
		}
		for prev, msg := range seen {
			if msg == r.Stderr {
				t.Errorf("%s and %s read alike: %q", c.name, prev, msg)
			}
		}
		seen[c.name] = r.Stderr
	}
	for _, id := range []string{"exp-1", "trunc-1", "taker-1", "meant-1"} {
		if _, ok := cp.Node(id); ok {
			t.Errorf("node %s was recorded by a refused enrolment", id)
		}
	}
}

func readConfig(t *testing.T, dir string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "mesh.json"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]any{}
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func mustAddrs(t *testing.T, addrs ...string) []netip.AddrPort {
	t.Helper()
	var out []netip.AddrPort
	for _, a := range addrs {
		ap, err := netip.ParseAddrPort(a)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ap)
	}
	return out
}

// servedHost serves a control plane of mesh and enrols one host, node, with a token
// of it; the agent is not started.
func servedHost(t *testing.T, mesh, node string) (*harness.ControlPlane, *harness.Host) {
	t.Helper()
	cp := harness.NewControlPlane(t, bin, mesh)
	cp.Serve()
	h := harness.NewHost(t, bin, node)
	if r := h.Enrol(cp.Token(node)); r.Code != 0 {
		t.Fatalf("enrol %s: %s", node, r.Combined())
	}
	return cp, h
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
