package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/controlplane/api"
	"mesh/controlplane/datadir"
	"mesh/controlplane/operator"
	"mesh/controlplane/pki"
	"mesh/integration/harness"
)

// TestOperatorCredentialsByName: an operator who leaves is an ordinary week. Before,
// every operator used a copy of some control node's admin.creds, which never
// expires, and taking one person's access away meant removing that control node.
// Now each gets credentials of their own (`meshctl operator add`), listed, expiring,
// and revoked alone: the broker refuses them from the revocation on, on every
// control node, after a restart too, and the connection they held is closed.
// Run twice, `add` refuses to write over the first file; a second credential under
// a name still valid is refused; the name is issued anew once revoked.
func TestOperatorCredentialsByName(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "opcreds")
	serve := cp.Serve()
	dir := t.TempDir()
	alice := filepath.Join(dir, "alice.creds")
	ca := filepath.Join(cp.Dir, datadir.CACertFile)
	asAlice := func(creds string, args ...string) harness.Result {
		return harness.Run(t, "", nil, bin.Meshctl, append(args, "--servers", cp.Listen, "--creds", creds, "--ca", ca)...)
	}

	r := cp.Ctl("operator", "add", "alice", "--ttl", "30d", "--out", alice)
	if r.Code != 0 || !strings.Contains(r.Stdout, "meshctl operator revoke alice") {
		t.Fatalf("operator add: exit %d\n%s", r.Code, r.Combined())
	}
	first, err := os.ReadFile(alice)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(alice); fi.Mode().Perm() != 0o600 {
		t.Fatalf("alice.creds mode %v, want 0600", fi.Mode().Perm())
	}
	if r := cp.Ctl("operator", "add", "alice", "--out", alice); r.Code != 2 || !strings.Contains(r.Stderr, "exists") {
		t.Fatalf("add run again over the same file: exit %d, want 2\n%s", r.Code, r.Combined())
	}
	if again, _ := os.ReadFile(alice); string(again) != string(first) {
		t.Fatal("the second run changed the first run's file")
	}
	other := filepath.Join(dir, "alice-2.creds")
	if r := cp.Ctl("operator", "add", "alice", "--out", other); r.Code != 4 || !strings.Contains(r.Stderr, api.CodeOperatorExists) {
		t.Fatalf("a second credential under alice: exit %d, want 4 operator_exists\n%s", r.Code, r.Combined())
	}
	if _, err := os.Stat(other); !os.IsNotExist(err) {
		t.Fatalf("a refused add left %s behind: %v", other, err)
	}
	// No file is left beside it either (the seed of credentials nobody recorded).
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("files in the output directory: %v, want alice.creds alone", entries)
	}

	if r := asAlice(alice, "nodes"); r.Code != 0 {
		t.Fatalf("nodes as alice: exit %d\n%s", r.Code, r.Combined())
	}
	// Each change is logged by the recorded name of the key that signed it.
	if r := asAlice(alice, "token", "--node", "web-1"); r.Code != 0 {
		t.Fatalf("token as alice: exit %d\n%s", r.Code, r.Combined())
	}
	harness.Eventually(t, 5*time.Second, "serve logs alice's token", func() bool {
		return strings.Contains(serve.Output(), `msg="operator change" op=token.create by=alice key=U`)
	})
	if !strings.Contains(serve.Output(), `msg="operator change" op=operator.add by="cp-1 (its admin.creds)"`) {
		t.Fatalf("the add through the control node's own credentials is not logged as its:\n%s", serve.Output())
	}
	if strings.Contains(serve.Output(), `op=nodes`) {
		t.Fatal("a read was logged as a change")
	}
	var list api.OperatorListResult
	if r := asAlice(alice, "operator", "list", "--json"); r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &list) != nil ||
		len(list.Operators) != 1 || list.Operators[0].Name != "alice" || list.Operators[0].State != api.OperatorValid ||
		list.Operators[0].Expires.Sub(time.Now()) < 29*24*time.Hour {
		t.Fatalf("operator list: exit %d %+v\n%s", r.Code, list, r.Combined())
	}

	// Alice's session, open as she is revoked.
	cfg, err := datadir.Dir(cp.Dir).LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	pin, _ := cfg.Pin()
	closed := make(chan struct{})
	nc, err := nats.Connect("tls://"+cp.Listen, append(operator.CredsLogin(alice, pki.PinnedClientConfig(pin), 10*time.Second),
		nats.NoReconnect(), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))...)
	if err != nil {
		t.Fatalf("alice's connection: %v", err)
	}
	defer nc.Close()

	if r := cp.Ctl("operator", "revoke", "alice"); r.Code != 0 || !strings.Contains(r.Stdout, "revoked alice") {
		t.Fatalf("revoke: exit %d\n%s", r.Code, r.Combined())
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("alice's open connection was not closed by the revocation")
	}
	r = asAlice(alice, "nodes")
	if r.Code != 3 || !strings.Contains(r.Stderr, "revoked") {
		t.Fatalf("nodes as alice, revoked: exit %d, want 3 naming a revocation\n%s", r.Code, r.Combined())
	}
	// Run again: nothing changes, and it says so (it read as a revocation made
	// now, a docs walkthrough).
	if r := cp.Ctl("operator", "revoke", "alice"); r.Code != 0 || !strings.Contains(r.Stdout, "alice (key ") || !strings.Contains(r.Stdout, "was already revoked, at") {
		t.Fatalf("revoke run again: exit %d, want 0 saying alice was already revoked\n%s", r.Code, r.Combined())
	}
	if r := cp.Ctl("operator", "revoke", "bob"); r.Code != 4 || !strings.Contains(r.Stderr, "not_found") {
		t.Fatalf("revoke of a name never issued: exit %d, want 4 not_found\n%s", r.Code, r.Combined())
	}

	// The name anew, with a new key; the old one stays refused after a restart.
	if r := cp.Ctl("operator", "add", "alice", "--out", other); r.Code != 0 {
		t.Fatalf("alice issued anew: exit %d\n%s", r.Code, r.Combined())
	}
	serve.Signal(syscall.SIGTERM)
	if code := serve.Wait(30 * time.Second); code != 0 {
		t.Fatalf("serve stopped with %d:\n%s", code, serve.Output())
	}
	cp.Serve()
	if r := asAlice(other, "nodes"); r.Code != 0 {
		t.Fatalf("nodes with alice's new credentials: exit %d\n%s", r.Code, r.Combined())
	}
	if r := asAlice(alice, "nodes"); r.Code != 3 {
		t.Fatalf("alice's revoked credentials after a restart: exit %d, want 3\n%s", r.Code, r.Combined())
	}
	if r := cp.Ctl("operator", "list"); r.Code != 0 || strings.Count(r.Stdout, "alice") != 2 || !strings.Contains(r.Stdout, "revoked") {
		t.Fatalf("operator list: exit %d\n%s", r.Code, r.Combined())
	}
}

// TestARevokedOperatorIsShutOutOfEveryControlNode: alice holds a connection on a
// control node that is not the one the revocation is sent to (a follower, or the
// leader when the revocation went through another broker): that node closes it as
// it applies the revocation, and every node refuses her login after. Her
// credentials work on every control node before (joined nodes record the issuing
// node's name). The nodes' own credentials stay admitted.
func TestARevokedOperatorIsShutOutOfEveryControlNode(t *testing.T) {
	cp1 := harness.NewControlPlane(t, bin, "opcreds-ha")
	cp1.Serve()
	cp2 := joinControl(t, cp1, "cp-2")
	cp3 := joinControl(t, cp1, "cp-3")
	alice := filepath.Join(t.TempDir(), "alice.creds")
	if r := cp1.Ctl("operator", "add", "alice", "--out", alice); r.Code != 0 {
		t.Fatalf("operator add: exit %d\n%s", r.Code, r.Combined())
	}
	ca := filepath.Join(cp1.Dir, datadir.CACertFile)
	asAlice := func(cp *harness.ControlPlane, args ...string) harness.Result {
		return harness.Run(t, "", nil, bin.Meshctl, append(args, "--servers", cp.Listen, "--creds", alice, "--ca", ca)...)
	}
	for _, cp := range []*harness.ControlPlane{cp1, cp2, cp3} {
		if r := asAlice(cp, "nodes"); r.Code != 0 {
			t.Fatalf("nodes as alice through %s: exit %d\n%s", cp.Listen, r.Code, r.Combined())
		}
	}
	cfg, err := datadir.Dir(cp1.Dir).LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	pin, _ := cfg.Pin()
	closed := make(chan struct{})
	nc, err := nats.Connect("tls://"+cp3.Listen, append(operator.CredsLogin(alice, pki.PinnedClientConfig(pin), 10*time.Second),
		nats.NoReconnect(), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))...)
	if err != nil {
		t.Fatalf("alice's connection to cp-3: %v", err)
	}
	defer nc.Close()
	// Revoked through cp-2's broker with cp-2's own credentials.
	if r := cp2.Ctl("operator", "revoke", "alice"); r.Code != 0 {
		t.Fatalf("revoke through cp-2: exit %d\n%s", r.Code, r.Combined())
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("alice's connection to cp-3 was not closed")
	}
	for _, cp := range []*harness.ControlPlane{cp1, cp2, cp3} {
		harness.Eventually(t, 10*time.Second, "alice refused at "+cp.Listen, func() bool { return asAlice(cp, "nodes").Code == 3 })
		if r := cp.Ctl("nodes"); r.Code != 0 {
			t.Fatalf("the control node's own credentials at %s: exit %d\n%s", cp.Listen, r.Code, r.Combined())
		}
	}
}

// TestOperatorCredentialsRenewed: credentials expire (90 days by default), and
// their holder moves to new ones without a moment shut out. Before, a second
// `operator add` under a valid name was refused, and the only way was to revoke
// the credentials in use first. `add --renew` issues new ones beside them (two at
// most); `revoke NAME --key KEY`, the key as `operator list` shows it, revokes the
// older alone, and closes the connection that held it while the new one works.
func TestOperatorCredentialsRenewed(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "renew")
	serve := cp.Serve()
	dir := t.TempDir()
	old, renewed := filepath.Join(dir, "alice.creds"), filepath.Join(dir, "alice-2.creds")
	ca := filepath.Join(cp.Dir, datadir.CACertFile)
	as := func(creds string, args ...string) harness.Result {
		return harness.Run(t, "", nil, bin.Meshctl, append(args, "--servers", cp.Listen, "--creds", creds, "--ca", ca)...)
	}
	if r := cp.Ctl("operator", "add", "alice", "--out", old); r.Code != 0 {
		t.Fatalf("operator add: exit %d\n%s", r.Code, r.Combined())
	}
	if r := cp.Ctl("operator", "add", "bob", "--out", filepath.Join(dir, "bob.creds")); r.Code != 0 {
		t.Fatalf("operator add bob: exit %d\n%s", r.Code, r.Combined())
	}
	cfg, err := datadir.Dir(cp.Dir).LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	pin, _ := cfg.Pin()
	closed := make(chan struct{})
	nc, err := nats.Connect("tls://"+cp.Listen, append(operator.CredsLogin(old, pki.PinnedClientConfig(pin), 10*time.Second),
		nats.NoReconnect(), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))...)
	if err != nil {
		t.Fatalf("alice's connection: %v", err)
	}
	defer nc.Close()

	r := cp.Ctl("operator", "add", "alice", "--renew", "--out", renewed)
	if r.Code != 0 || !strings.Contains(r.Stdout, "stay valid") || !strings.Contains(r.Stdout, "meshctl operator revoke alice --key") {
		t.Fatalf("operator add --renew: exit %d\n%s", r.Code, r.Combined())
	}
	for _, creds := range []string{old, renewed} {
		if r := as(creds, "nodes"); r.Code != 0 {
			t.Fatalf("nodes with %s after the renewal: exit %d\n%s", filepath.Base(creds), r.Code, r.Combined())
		}
	}
	if r := cp.Ctl("operator", "add", "alice", "--renew", "--out", filepath.Join(dir, "alice-3.creds")); r.Code != 4 || !strings.Contains(r.Stderr, "as many valid credentials") {
		t.Fatalf("a third valid credential under alice: exit %d, want 4\n%s", r.Code, r.Combined())
	}
	var list api.OperatorListResult
	if r := as(renewed, "operator", "list", "--json"); r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &list) != nil || len(list.Operators) != 3 {
		t.Fatalf("operator list --json: exit %d\n%s", r.Code, r.Combined())
	}
	// Listed by name, then issue time: alice's older first.
	if list.Operators[0].Name != "alice" || list.Operators[1].Name != "alice" || list.Operators[2].Name != "bob" ||
		list.Operators[0].State != api.OperatorValid || list.Operators[1].State != api.OperatorValid {
		t.Fatalf("operator list --json: %+v", list.Operators)
	}
	oldKey, bobKey := list.Operators[0].Key, list.Operators[2].Key
	// The key as the table shows it, its ellipsis too.
	shown := oldKey[:12] + "…"
	// The table names the control node whose account key signed each.
	if r := cp.Ctl("operator", "list"); r.Code != 0 || !strings.Contains(r.Stdout, shown) || !strings.Contains(r.Stdout, "ISSUED BY") || strings.Count(r.Stdout, " cp-1\n") != 3 {
		t.Fatalf("operator list does not show %s, nor who issued each:\n%s", shown, r.Combined())
	}
	if r := cp.Ctl("operator", "revoke", "alice", "--key", bobKey[:12]); r.Code != 4 || !strings.Contains(r.Stderr, "no credentials of alice") {
		t.Fatalf("revoke alice by bob's key: exit %d, want 4\n%s", r.Code, r.Combined())
	}
	if r := cp.Ctl("operator", "revoke", "alice", "--key", shown); r.Code != 0 || strings.Count(r.Stdout, "revoked alice") != 1 {
		t.Fatalf("revoke alice --key %s: exit %d\n%s", shown, r.Code, r.Combined())
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the older credentials' open connection was not closed by their revocation")
	}
	if r := as(old, "nodes"); r.Code != 3 || !strings.Contains(r.Stderr, "revoked") {
		t.Fatalf("nodes with the revoked older credentials: exit %d, want 3\n%s", r.Code, r.Combined())
	}
	if r := as(renewed, "token", "--node", "web-1"); r.Code != 0 {
		t.Fatalf("a change with the renewed credentials: exit %d\n%s", r.Code, r.Combined())
	}
	harness.Eventually(t, 5*time.Second, "serve logs alice's token", func() bool {
		return strings.Contains(serve.Output(), `msg="operator change" op=token.create by=alice key=U`)
	})
	if !strings.Contains(serve.Output(), "renewal=true") {
		t.Fatalf("the renewal is not logged as one:\n%s", serve.Output())
	}
	if r := as(filepath.Join(dir, "bob.creds"), "nodes"); r.Code != 0 {
		t.Fatalf("bob after alice's revocation by key: exit %d\n%s", r.Code, r.Combined())
	}
}
