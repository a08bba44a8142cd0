package integration

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/controlplane/datadir"
	"mesh/integration/harness"
)

// notifySocket listens where a systemd service manager would ($NOTIFY_SOCKET) and
// passes on every message a service sends there.
func notifySocket(t *testing.T) (string, <-chan string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	msgs := make(chan string, 16)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(msgs)
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	return path, msgs
}

// waitNotify waits for a message that contains want, and returns it.
func waitNotify(t *testing.T, msgs <-chan string, want string, limit time.Duration, p *harness.Process) string {
	t.Helper()
	deadline := time.After(limit)
	for {
		select {
		case m, ok := <-msgs:
			if !ok {
				t.Fatalf("notify socket closed before %q", want)
			}
			if strings.Contains(m, want) {
				return m
			}
		case <-deadline:
			t.Fatalf("no %q on the notify socket within %s; output:\n%s", want, limit, p.Output())
		}
	}
}

// TestOperatorCommands drives the operator's side of the command line against a real
// mesh: readiness under systemd's notify protocol, --json of every command that
// prints data, flag values after a space, progress without carriage returns off a
// terminal, labels as key=value, status's exit code both ways, node-name
// completion, an operator's machine that holds only creds, CA and addresses (and is
// refused by a broker of another CA), and the host's status after a revocation.
func TestOperatorCommands(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "ops")
	serveSock, serveMsgs := notifySocket(t)
	serve := harness.Start(t, []string{"NOTIFY_SOCKET=" + serveSock}, bin.Meshctl, "serve", "--data", cp.Dir,
		"--raft-heartbeat", "300ms", "--reconcile", "1s", "--offline-after", "3s", "--log-format", "json")
	ready := waitNotify(t, serveMsgs, "READY=1", 30*time.Second, serve)
	if !strings.Contains(ready, "STATUS=control node cp-1 of mesh ops") {
		t.Errorf("readiness without a status line: %q", ready)
	}
	// Ready means it serves: the first call after READY=1 succeeds.
	if r := cp.Ctl("nodes"); r.Code != 0 {
		t.Fatalf("nodes right after READY=1: exit %d\n%s", r.Code, r.Combined())
	}
	for _, line := range strings.Split(strings.TrimSpace(serve.Output()), "\n")[:1] {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil || rec["msg"] == nil {
			t.Errorf("--log-format json wrote %q (%v)", line, err)
		}
	}

	// token --json carries the token beside what it admits.
	r := cp.Ctl("token", "--node", "web-1", "--label", "tier=web", "--ttl", "10m", "--json")
	var tok struct {
		Token, Mesh, Node, Role string
		Brokers                 []string
		ExpiresAt               time.Time `json:"expires_at"`
		Labels                  map[string]string
	}
	if err := json.Unmarshal([]byte(r.Stdout), &tok); r.Code != 0 || err != nil || !strings.HasPrefix(tok.Token, "mesh1_ops_") ||
		tok.Node != "web-1" || tok.Role != "worker" || len(tok.Brokers) == 0 || time.Until(tok.ExpiresAt) > 11*time.Minute || tok.Labels["tier"] != "web" || len(tok.Labels) != 1 {
		t.Fatalf("token --json: exit %d, %v\n%s", r.Code, err, r.Combined())
	}
	web := harness.NewHost(t, bin, "web-1")
	if r := web.Enrol(tok.Token); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	agentSock, agentMsgs := notifySocket(t)
	agent := harness.Start(t, []string{"NOTIFY_SOCKET=" + agentSock}, bin.Meshhost, "run", "--state", web.State, "--root", web.Root, "--heartbeat", "1s")
	if m := waitNotify(t, agentMsgs, "READY=1", 30*time.Second, agent); !strings.Contains(m, "connected and synced") {
		t.Errorf("agent readiness: %q", m)
	}

	// --wait takes its value after a space; off a terminal, progress is plain lines.
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	writeFile(t, good, `{"files":[{"path":"etc/app.conf","content":"ok\n"}]}`)
	r = cp.Ctl("declare", "--node", "web-1", "--file", good, "--wait", "30s")
	if r.Code != 0 || !strings.Contains(r.Stderr, "1 converged") || strings.Contains(r.Stderr, "\r") {
		t.Fatalf("declare --wait 30s: exit %d\n%q", r.Code, r.Combined())
	}
	r = cp.Ctl("status")
	if r.Code != 0 || !strings.Contains(r.Stdout, "1 node(s): 1 converged") {
		t.Fatalf("status of a converged mesh: exit %d\n%s", r.Code, r.Combined())
	}

	// label: key=value, sorted; --json is the node.
	r = cp.Ctl("label", "web-1", "zone=b")
	if r.Code != 0 || strings.TrimSpace(r.Stdout) != "web-1 labels: tier=web zone=b" {
		t.Fatalf("label: exit %d\n%s", r.Code, r.Combined())
	}
	r = cp.Ctl("label", "web-1", "zone=", "--json")
	var view struct {
		ID     string
		Labels map[string]string
	}
	if err := json.Unmarshal([]byte(r.Stdout), &view); r.Code != 0 || err != nil || view.ID != "web-1" || len(view.Labels) != 1 || view.Labels["tier"] != "web" {
		t.Fatalf("label --json: exit %d, %v\n%s", r.Code, err, r.Combined())
	}
	if strings.Contains(r.Stderr, "had no label") {
		t.Errorf("removing a label web-1 had is said to remove nothing:\n%s", r.Stderr)
	}
	// Removing a label the node does not have (a typo of one it has) is said, as
	// kubectl says it; before, it passed without a word (a CLI audit).
	r = cp.Ctl("label", "web-1", "teir=")
	if r.Code != 0 || !strings.Contains(r.Stderr, "web-1 had no label teir") || strings.TrimSpace(r.Stdout) != "web-1 labels: tier=web" {
		t.Errorf("removing a label web-1 does not have: exit %d\n%s", r.Code, r.Combined())
	}

	// The shell asks for node ids; the control plane answers.
	r = harness.Run(t, "", nil, bin.Meshctl, "__complete", "revoke", "--data", cp.Dir, "")
	if r.Code != 0 || !strings.Contains(r.Stdout, "web-1\tworker, alive") {
		t.Fatalf("completing revoke's node: exit %d\n%s", r.Code, r.Combined())
	}

	// An operator's own machine: the creds, the CA and the addresses, nothing else.
	op := t.TempDir()
	creds, ca := filepath.Join(op, "admin.creds"), filepath.Join(op, "ca.pem")
	copyFile(t, filepath.Join(cp.Dir, datadir.AdminCredsFile), creds, 0o600)
	copyFile(t, filepath.Join(cp.Dir, datadir.CACertFile), ca, 0o644)
	if r := harness.Run(t, "", nil, bin.Meshctl, "nodes", "--servers", cp.Listen, "--creds", creds, "--ca", ca); r.Code != 0 || !strings.Contains(r.Stdout, "web-1") {
		t.Fatalf("nodes with flags: exit %d\n%s", r.Code, r.Combined())
	}
	// A copy others may read is refused before it is used, as serve refuses its own.
	loose := filepath.Join(op, "loose.creds")
	copyFile(t, filepath.Join(cp.Dir, datadir.AdminCredsFile), loose, 0o644)
	if r := harness.Run(t, "", nil, bin.Meshctl, "nodes", "--servers", cp.Listen, "--creds", loose, "--ca", ca); r.Code != 7 || !strings.Contains(r.Stderr, "chmod 600 "+loose) {
		t.Fatalf("nodes with creds others may read: exit %d, want 7 and the fix\n%s", r.Code, r.Combined())
	}
	env := []string{"MESH_SERVERS=tls://" + cp.Listen, "MESH_CREDS=" + creds, "MESH_CA=" + ca}
	if r := harness.Run(t, "", env, bin.Meshctl, "status"); r.Code != 0 || !strings.Contains(r.Stdout, "1 converged") {
		t.Fatalf("status with MESH_*: exit %d\n%s", r.Code, r.Combined())
	}
	if r := harness.Run(t, "", env, bin.Meshctl, "token", "--node", "web-2"); r.Code != 0 || !strings.HasPrefix(r.Stdout, "mesh1_ops_") {
		t.Fatalf("token with MESH_*: exit %d\n%s", r.Code, r.Combined())
	}
	config := filepath.Join(op, "config")
	ctxFile := filepath.Join(config, "nats", "context", "ops.json")
	if err := os.MkdirAll(filepath.Dir(ctxFile), 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, ctxFile, `{"description":"ops mesh","url":"tls://`+cp.Listen+`","creds":"`+creds+`","ca":"`+ca+`","tls_first":true}`)
	r = harness.Run(t, "", []string{"XDG_CONFIG_HOME=" + config}, bin.Meshctl, "nodes", "--context", "ops", "--json")
	if r.Code != 0 || !strings.Contains(r.Stdout, `"id": "web-1"`) {
		t.Fatalf("nodes --context: exit %d\n%s", r.Code, r.Combined())
	}
	// The pin is computed from the CA given: a broker of another CA is refused in
	// the handshake, before the credentials are used; exit 4, as join's, since
	// waiting does not mend it (it was 3, the exit scripts retry on).
	other := harness.NewControlPlane(t, bin, "other")
	r = harness.Run(t, "", nil, bin.Meshctl, "nodes", "--servers", cp.Listen, "--creds", creds, "--ca", filepath.Join(other.Dir, datadir.CACertFile))
	if r.Code != 4 || !strings.Contains(r.Stderr, "does not chain to the pinned mesh CA") {
		t.Fatalf("a broker of another CA: exit %d\n%s", r.Code, r.Combined())
	}

	// A live node that fails its declaration: status exits 5 and names it; once
	// it applies one, status exits 0 again.
	if err := os.MkdirAll(filepath.Join(web.Root, "etc", "blocked"), 0o755); err != nil {
		t.Fatal(err)
	}
	blocked := filepath.Join(dir, "blocked.json")
	writeFile(t, blocked, `{"files":[{"path":"etc/blocked","content":"x"}]}`)
	if r := cp.Ctl("declare", "--node", "web-1", "--file", blocked, "--wait", "20s"); r.Code != 5 {
		t.Fatalf("declare of a failing file: exit %d\n%s", r.Code, r.Combined())
	}
	r = cp.Ctl("status", "--json")
	var st struct {
		Summary struct{ Failing int }
	}
	if err := json.Unmarshal([]byte(r.Stdout), &st); r.Code != 5 || err != nil || st.Summary.Failing != 1 || !strings.Contains(r.Stderr, "1 failing apply_failed: web-1") {
		t.Fatalf("status --json with a failing node: exit %d, %v\n%s", r.Code, err, r.Combined())
	}
	if r := cp.Ctl("status"); r.Code != 5 {
		t.Fatalf("status with a failing node: exit %d\n%s", r.Code, r.Combined())
	}
	if r := cp.Ctl("declare", "--node", "web-1", "--file", good, "--wait", "20s"); r.Code != 0 {
		t.Fatalf("declare that applies: exit %d\n%s", r.Code, r.Combined())
	}
	if r := cp.Ctl("status"); r.Code != 0 {
		t.Fatalf("status once converged again: exit %d\n%s", r.Code, r.Combined())
	}

	// revoke --json; the agent stops (6), says STOPPING=1, and meshhost status
	// exits 6 from then on.
	r = cp.Ctl("revoke", "web-1", "--json")
	var rev struct {
		Revoked []struct {
			Node        string `json:"node"`
			Connections int    `json:"connections"`
		} `json:"revoked"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &rev); r.Code != 0 || err != nil || len(rev.Revoked) != 1 || rev.Revoked[0].Node != "web-1" || rev.Revoked[0].Connections != 1 {
		t.Fatalf("revoke --json: exit %d, %v\n%s", r.Code, err, r.Combined())
	}
	if code := agent.Wait(15 * time.Second); code != hostExitRevoked {
		t.Fatalf("agent after revocation: exit %d\n%s", code, agent.Output())
	}
	waitNotify(t, agentMsgs, "STOPPING=1", 5*time.Second, agent)
	hs := harness.Run(t, "", nil, bin.Meshhost, "status", "--state", web.State)
	if hs.Code != hostExitRevoked || !strings.Contains(hs.Stdout, "REVOKED") {
		t.Fatalf("meshhost status of a revoked node: exit %d\n%s", hs.Code, hs.Combined())
	}
	// With a node revoked (not live) and none other, status is converged.
	if r := cp.Ctl("status"); r.Code != 0 || !strings.Contains(r.Stdout, "1 revoked") {
		t.Fatalf("status with only a revoked node: exit %d\n%s", r.Code, r.Combined())
	}

	serve.Signal(syscall.SIGTERM)
	waitNotify(t, serveMsgs, "STOPPING=1", 15*time.Second, serve)
	if code := serve.Wait(15 * time.Second); code != 0 {
		t.Fatalf("serve after SIGTERM: exit %d\n%s", code, serve.Output())
	}
}
