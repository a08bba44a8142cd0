package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"mesh/controlplane/api"
	"mesh/controlplane/bootstrap"
	"mesh/controlplane/datadir"
	"mesh/controlplane/operator"
	"mesh/controlplane/pki"
	"mesh/host/busyaddr"
	"mesh/integration/freeport"
)

func runCLIEnv(env map[string]string, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, &cliIO{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(k string) string { return env[k] }})
	return code, out.String(), errb.String()
}

// TestFlagValueForms: every flag takes its value as the next argument or after "=",
// --wait included, and --wait alone still means its default. The command line is
// accepted (the failure is the empty data directory, exit 7, not a usage error).
func TestFlagValueForms(t *testing.T) {
	dir := t.TempDir()
	body := filepath.Join(dir, "body.json")
	writeTestFile(t, body, `{"files":[]}`)
	base := []string{"declare", "--data", dir, "--node", "web-1", "--file", body}
	for _, extra := range [][]string{
		{"--wait", "30s"},
		{"--wait=30s"},
		{"--wait"},
		{"--wait", "--json"},
		{"--leader-wait", "1s", "--wait", "2m"},
		{"--leader-wait=1s"},
		{"--timeout", "30s", "--wait", "2m"},
		{"--timeout=1m"},
		{"--json", "--wait", "1m30s"},
	} {
		code, _, stderr := runCLI(append(slices.Clone(base), extra...)...)
		if code != exitDataDir {
			t.Errorf("%v: exit %d, want %d (the data directory's error, not the command line's):\n%s", extra, code, exitDataDir, stderr)
		}
	}
	// What follows --wait and is not a duration stays an argument of its own.
	code, _, stderr := runCLI(append(slices.Clone(base), "--wait", "soon")...)
	if code != exitUsage || !strings.Contains(stderr, `unexpected argument "soon"`) {
		t.Errorf("--wait soon: exit %d: %s", code, stderr)
	}
}

func TestJoinOptionalValues(t *testing.T) {
	root := newRoot(&cliIO{stdin: strings.NewReader(""), stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}, getenv: func(string) string { return "" }})
	cases := []struct{ in, want []string }{
		{[]string{"declare", "--wait", "30s", "--all"}, []string{"declare", "--wait=30s", "--all"}},
		{[]string{"declare", "--wait", "--all"}, []string{"declare", "--wait", "--all"}},
		{[]string{"declare", "--wait"}, []string{"declare", "--wait"}},
		{[]string{"declare", "--", "--wait", "30s"}, []string{"declare", "--", "--wait", "30s"}},
		// Only flags whose value is optional: --json takes no value at all.
		{[]string{"nodes", "--json", "web-1"}, []string{"nodes", "--json", "web-1"}},
		{[]string{"frobnicate", "--wait", "30s"}, []string{"frobnicate", "--wait", "30s"}},
	}
	for _, c := range cases {
		if got := joinOptionalValues(root, c.in); !slices.Equal(got, c.want) {
			t.Errorf("%v: got %v, want %v", c.in, got, c.want)
		}
	}
}

func TestVersion(t *testing.T) {
	code, line, _ := runCLI("version")
	if code != exitOK || !strings.HasPrefix(line, "meshctl "+version+" (") || strings.Count(line, "\n") != 1 {
		t.Fatalf("version: exit %d, %q", code, line)
	}
	code, flagLine, _ := runCLI("--version")
	if code != exitOK || flagLine != line {
		t.Fatalf("--version: exit %d, %q; want the same line as `version`, %q", code, flagLine, line)
	}
	code, out, _ := runCLI("version", "--json")
	var v buildVersion
	if err := json.Unmarshal([]byte(out), &v); code != exitOK || err != nil || v.Program != "meshctl" || v.Version != version || !strings.HasPrefix(v.Go, "go") {
		t.Fatalf("version --json: exit %d, %v, %s", code, err, out)
	}
	// README offers --version with --json too: it was refused, exit 2.
	if code, flagOut, _ := runCLI("--version", "--json"); code != exitOK || flagOut != out {
		t.Fatalf("--version --json: exit %d, %q; want %q", code, flagOut, out)
	}
}

// TestVersionFromBuildInfo: the revision, its time and a dirty tree come from the
// build information Go records.
func TestVersionFromBuildInfo(t *testing.T) {
	info := &debug.BuildInfo{GoVersion: "go1.26.8", Settings: []debug.BuildSetting{
		{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "arm64"},
		{Key: "vcs", Value: "git"},
		{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.time", Value: "2026-12-01T10:00:00Z"},
		{Key: "vcs.modified", Value: "true"},
	}}
	v := versionFrom("meshctl", "0.1.0", info, true)
	if v.Revision != "0123456789abcdef0123456789abcdef01234567" || v.CommitTime != "2026-12-01T10:00:00Z" || !v.Modified || v.Platform != "linux/arm64" {
		t.Fatalf("read %+v", v)
	}
	if got, want := v.String(), "meshctl 0.1.0+git20261201100000.0123456789ab.dirty (revision 0123456789ab+modified of 2026-12-01T10:00:00Z, go1.26.8 linux/arm64)"; got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	none := versionFrom("meshctl", "0.1.0", &debug.BuildInfo{GoVersion: "go1.26.8"}, true)
	if !strings.Contains(none.String(), "revision unknown") || none.Version != "0.1.0" {
		t.Fatalf("without VCS information: %q", none.String())
	}
	tagged := versionFrom("meshctl", "0.1.0", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.2.0"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"}, {Key: "vcs.time", Value: "2026-12-01T10:00:00Z"}}}, true)
	if tagged.Version != "0.2.0" {
		t.Fatalf("built from the commit tagged v0.2.0: version %q", tagged.Version)
	}
}

func TestCompletionScripts(t *testing.T) {
	for shell, marker := range map[string]string{"bash": "__start_meshctl", "zsh": "#compdef meshctl", "fish": "complete -c meshctl"} {
		code, out, stderr := runCLI("completion", shell)
		if code != exitOK || !strings.Contains(out, marker) {
			t.Errorf("completion %s: exit %d, no %q in %d bytes; %s", shell, code, marker, len(out), stderr)
		}
	}
}

// TestCompletionCandidates asks what the shell scripts ask: commands, flags, fixed
// values. (Node ids need a running control plane: integration/ops_test.go.)
func TestCompletionCandidates(t *testing.T) {
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"__complete", "re"}, []string{"revoke"}},
		{[]string{"__complete", ""}, []string{"bootstrap", "declare", "status", "completion", "version"}},
		{[]string{"__complete", "declare", "--wa"}, []string{"--wait"}},
		{[]string{"__complete", "nodes", "--"}, []string{"--data", "--servers", "--creds", "--ca", "--context", "--json"}},
		{[]string{"__complete", "serve", "--log-format", ""}, []string{"text", "json"}},
		{[]string{"__complete", "token", "--role", ""}, []string{"worker", "control"}},
		{[]string{"__complete", "status", "--state", ""}, []string{"alive", "offline", "revoked"}},
		{[]string{"__complete", "nodes", "--ro"}, []string{"--role"}},
		{[]string{"__complete", "signing-key", ""}, []string{"rotate", "status", "retire"}},
		{[]string{"__complete", "token", ""}, []string{"list", "cancel"}},
		{[]string{"__complete", "completion", ""}, []string{"bash", "zsh", "fish"}},
	}
	for _, c := range cases {
		code, out, stderr := runCLI(c.args...)
		if code != exitOK {
			t.Errorf("%v: exit %d: %s", c.args, code, stderr)
			continue
		}
		var got []string
		for _, line := range strings.Split(out, "\n") {
			if line == "" || strings.HasPrefix(line, ":") {
				continue
			}
			name, _, _ := strings.Cut(line, "\t")
			got = append(got, name)
		}
		for _, w := range c.want {
			if !slices.Contains(got, w) {
				t.Errorf("%v: %q not among %v", c.args, w, got)
			}
		}
	}
	// A node id cannot be offered without a control plane, and asking must not hang.
	start := time.Now()
	if code, _, _ := runCLI("__complete", "revoke", "--data", t.TempDir(), ""); code != exitOK || time.Since(start) > 5*time.Second {
		t.Fatalf("completing a node id without a control plane: exit %d after %s", code, time.Since(start))
	}
}

func TestLabelsPrintAsKeyValue(t *testing.T) {
	if got := formatLabels(map[string]string{"zone": "b", "tier": "web", "empty": ""}); got != "empty= tier=web zone=b" {
		t.Fatalf("got %q", got)
	}
	if got := formatLabels(nil); got != "(none)" {
		t.Fatalf("no labels: %q", got)
	}
	if got := (labelFlag{"b": "2", "a": "1"}).String(); got != "a=1,b=2" {
		t.Fatalf("flag: %q", got)
	}
}

// TestProgressLine: a terminal gets one line redrawn with \r; a pipe or a log gets a
// plain line each time the report changes, and never a \r.
func TestProgressLine(t *testing.T) {
	var tty, plain bytes.Buffer
	reports := []string{"1 pending", "1 pending", "1 converged"}
	for i, r := range reports {
		final := i == len(reports)-1
		(&progressLine{w: &tty, redraw: true}).show(r, time.Duration(i)*time.Second, final)
	}
	p := progressLine{w: &plain}
	for i, r := range reports {
		p.show(r, time.Duration(i)*time.Second, i == len(reports)-1)
	}
	if strings.Count(tty.String(), "\r") != 3 || !strings.HasSuffix(tty.String(), "\n") {
		t.Fatalf("terminal output %q", tty.String())
	}
	if strings.Contains(plain.String(), "\r") {
		t.Fatalf("plain output has a carriage return: %q", plain.String())
	}
	if got, want := plain.String(), "1 pending (0s)\n1 converged (2s)\n"; got != want {
		t.Fatalf("plain output %q, want %q", got, want)
	}
}

func TestStatusVerdict(t *testing.T) {
	v := func(n uint64) *uint64 { return &n }
	converged := api.NodeView{ID: "web-1", State: api.StateAlive, Declared: 2, Applied: v(2), Converged: true}
	if err := notConverged([]api.NodeView{converged,
		{ID: "off-1", State: api.StateOffline, Declared: 2, Applied: v(1)},
		{ID: "gone-1", State: api.StateRevoked, Declared: 3},
	}, false); err != nil {
		t.Fatalf("every live node converged; offline and revoked ones do not count: %v", err)
	}
	// Named, they do: `meshctl status off-1` is about off-1.
	err := notConverged([]api.NodeView{converged,
		{ID: "off-1", State: api.StateOffline, Declared: 2, Applied: v(1)},
		{ID: "off-2", State: api.StateOffline, Declared: 2, Applied: v(2), Converged: true},
		{ID: "gone-1", State: api.StateRevoked, Declared: 3},
	}, true)
	if !errors.As(err, new(exitError)) || !strings.Contains(err.Error(), "2 node(s) named: 1 offline, behind: off-1 (declared v2); 1 revoked: gone-1") {
		t.Fatalf("named offline and revoked nodes: %v", err)
	}
	err = notConverged([]api.NodeView{converged,
		{ID: "web-2", State: api.StateAlive, Declared: 3, Applied: v(2), LastError: &api.StatusError{Code: "apply_failed", Version: 3}},
		{ID: "web-3", State: api.StateAlive, Declared: 3, Applied: v(2)},
		{ID: "web-4", State: api.StateAlive, Declared: 3, Applied: v(3), Converged: true, Stale: true},
		{ID: "web-5", State: api.StateAlive, Declared: 3, Applied: v(3), LastError: &api.StatusError{Code: "hook_failed", Version: 3,
			Message: "hook restart-app: exit status 1: " + strings.Repeat("starting app.service ", 20) + "bind: port 8080 in use"}},
		{ID: "web-6", State: api.StateAlive, Declared: 3, Applied: v(3), HooksRunning: true},
	}, false)
	var ex exitError
	if !errors.As(err, &ex) || ex.code != exitNotConverged {
		t.Fatalf("want exit %d, got %v", exitNotConverged, err)
	}
	for _, want := range []string{"5 live node(s)", "1 failing apply_failed: web-2", "1 behind: web-3 (declared v3)", "1 stale: web-4",
		"1 failing hook_failed in hook restart-app (fix the host, then `meshhost hooks retry` there): web-5 (exit status 1",
		"port 8080 in use)", "1 hooks running: web-6"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "web-1") {
		t.Errorf("names a converged node: %v", err)
	}
}

func TestLogFormatFlag(t *testing.T) {
	cases := []struct {
		format       string
		logJSON, set bool
		want         string
		bad          bool
	}{
		{"text", false, false, "text", false},
		{"json", false, true, "json", false},
		{"text", true, false, "json", false}, // --log-json alone
		{"json", true, true, "json", false},
		{"text", true, true, "", true},
		{"xml", false, true, "", true},
	}
	for _, c := range cases {
		got, err := logFormatFlag(c.format, c.logJSON, c.set)
		var ue usageError
		if c.bad != errors.As(err, &ue) || got != c.want {
			t.Errorf("%+v: got %q, %v", c, got, err)
		}
	}
	var buf bytes.Buffer
	log, err := newLogger(&buf, "info", "json")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hello", "k", "v")
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil || line["msg"] != "hello" || line["k"] != "v" {
		t.Fatalf("json log line %q: %v", buf.String(), err)
	}
}

// operatorFiles writes what an operator's machine holds: a CA certificate and a
// .creds file (judged before dialling: it must be one).
func operatorFiles(t *testing.T) (dir, ca, creds string) {
	t.Helper()
	dir = t.TempDir()
	c, _, err := pki.NewCA("m", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ca = filepath.Join(dir, "ca.pem")
	creds = filepath.Join(dir, "admin.creds")
	writeTestFile(t, ca, string(c.CertPEM))
	account, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	credsText, err := bootstrap.OperatorCreds(account, "test")
	if err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, creds, string(credsText))
	return dir, ca, creds
}

// TestEndpointSources: on an operator's machine, each of servers, creds and CA comes
// from its flag, else the NATS context --context names, else its environment
// variable, else the context MESH_CONTEXT names; the pin is the CA's.
func TestEndpointSources(t *testing.T) {
	dir, ca, creds := operatorFiles(t)
	caPEM, _ := os.ReadFile(ca)
	caCert, _ := pki.ParseCertificatePEM(caPEM)
	pin := pki.PinOf(caCert)
	ctxDir := filepath.Join(dir, "config", "nats", "context")
	if err := os.MkdirAll(ctxDir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, filepath.Join(ctxDir, "mesh.json"), `{"url":"tls://10.9.9.9:7300","creds":"`+creds+`","ca":"`+ca+`"}`)

	cases := []struct {
		name        string
		f           controlPlaneFlags
		env         map[string]string
		wantServers []string
	}{
		{"flags", controlPlaneFlags{servers: []string{"10.0.0.1:7300", "tls://10.0.0.2:7300"}, creds: creds, ca: ca}, nil, []string{"10.0.0.1:7300", "10.0.0.2:7300"}},
		{"environment", controlPlaneFlags{}, map[string]string{envServers: "10.0.0.3:7300,10.0.0.4:7300", envCreds: creds, envCA: ca}, []string{"10.0.0.3:7300", "10.0.0.4:7300"}},
		{"flag over environment", controlPlaneFlags{servers: []string{"10.0.0.5:7300"}}, map[string]string{envServers: "10.0.0.3:7300", envCreds: creds, envCA: ca}, []string{"10.0.0.5:7300"}},
		{"context", controlPlaneFlags{context: "mesh"}, map[string]string{"XDG_CONFIG_HOME": filepath.Join(dir, "config")}, []string{"10.9.9.9:7300"}},
		// A --context on the command line comes before the environment, which
		// names another mesh (it was never read).
		{"a context flag over the environment", controlPlaneFlags{context: "mesh"}, map[string]string{"XDG_CONFIG_HOME": filepath.Join(dir, "config"),
			envServers: "10.0.0.3:7300", envCreds: "/elsewhere/admin.creds", envCA: "/elsewhere/ca.pem"}, []string{"10.9.9.9:7300"}},
		{"context from the environment, a flag over it", controlPlaneFlags{servers: []string{"10.0.0.6:7300"}}, map[string]string{envContext: filepath.Join(ctxDir, "mesh.json")}, []string{"10.0.0.6:7300"}},
	}
	for _, c := range cases {
		f := c.f
		f.remoteAllowed = true
		f.getenv = func(k string) string { return c.env[k] }
		e, err := f.endpoint()
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !slices.Equal(e.Servers, c.wantServers) || e.Creds != creds || e.Pin != pin {
			t.Errorf("%s: endpoint %v %s, pin matches %v", c.name, e.Servers, e.Creds, e.Pin == pin)
		}
	}
}

// TestEndpointFromDataDir: --data reads mesh.json and admin.creds; --servers may
// replace the brokers.
func TestEndpointFromDataDir(t *testing.T) {
	dir := t.TempDir()
	d := datadir.Dir(dir)
	pinHex := strings.Repeat("ab", 32)
	if err := d.SaveConfig(datadir.Config{Mesh: "m", Node: "cp-1", Listen: "127.0.0.1:7300", Brokers: []string{"127.0.0.1:7300"}, CAPin: pinHex}); err != nil {
		t.Fatal(err)
	}
	// Credentials that hold a user JWT: meshctl refuses others before it dials.
	account, _ := nkeys.CreateAccount()
	creds, err := bootstrap.OperatorCreds(account, "admin")
	if err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, d.Path(datadir.AdminCredsFile), string(creds))
	f := controlPlaneFlags{dir: dir, remoteAllowed: true, getenv: func(string) string { return "" }}
	e, err := f.endpoint()
	if err != nil || e.Creds != d.Path(datadir.AdminCredsFile) || e.Servers[0] != "127.0.0.1:7300" {
		t.Fatalf("%+v %v", e, err)
	}
	f.servers = []string{"10.0.0.7:7300"}
	if e, err = f.endpoint(); err != nil || !slices.Equal(e.Servers, []string{"10.0.0.7:7300"}) {
		t.Fatalf("--servers with --data: %+v %v", e, err)
	}
	// The environment of an operator's machine does not override a data directory.
	f.servers = nil
	f.getenv = func(k string) string { return map[string]string{envCA: "/elsewhere/ca.pem"}[k] }
	if e, err = f.endpoint(); err != nil || e.Creds != d.Path(datadir.AdminCredsFile) {
		t.Fatalf("environment with --data: %+v %v", e, err)
	}
	// Unreachable, it says so with the data-directory hint.
	_, err = operator.DialEndpoint(e, operator.Options{Timeout: 500 * time.Millisecond})
	if !errors.Is(err, operator.ErrUnreachable) || !strings.Contains(err.Error(), "meshctl serve --data "+dir) {
		t.Fatalf("dial: %v", err)
	}
}

// TestBootstrapJSON: with --json the plan goes to stderr and stdout is the mesh as
// bootstrapped, its pin the one mesh.json records.
func TestBootstrapJSON(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cp")
	addrs := freeport.Addrs(t, 3)
	code, out, stderr := runCLI("bootstrap", "--mesh", "js", "--listen", addrs[0], "--raft-listen", addrs[1], "--cluster-listen", addrs[2], "--data", dir, "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var res bootstrapResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("stdout is not JSON (%v):\n%s", err, out)
	}
	cfg, err := datadir.Dir(dir).LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	if res.Mesh != "js" || res.Node != "cp-1" || res.CAPin != cfg.CAPin || len(res.CAPin) != 64 || !strings.Contains(stderr, "plan") {
		t.Fatalf("result %+v (pin in mesh.json %s); stderr:\n%s", res, cfg.CAPin, stderr)
	}
}

// --timeout and --leader-wait reach the operator client as they were given.
func TestCallFlagsReachTheClient(t *testing.T) {
	for _, c := range []struct {
		f    controlPlaneFlags
		want operator.Options
	}{
		{controlPlaneFlags{leaderWait: operator.DefaultLeaderWait, timeout: operator.DefaultTimeout}, operator.Options{LeaderWait: operator.DefaultLeaderWait, Timeout: operator.DefaultTimeout}},
		{controlPlaneFlags{leaderWait: time.Second, timeout: time.Minute}, operator.Options{LeaderWait: time.Second, Timeout: time.Minute}},
		{controlPlaneFlags{leaderWait: 0, timeout: 3 * time.Second}, operator.Options{LeaderWait: -1, Timeout: 3 * time.Second}},
	} {
		got, err := c.f.options()
		if err != nil || got.LeaderWait != c.want.LeaderWait || got.Timeout != c.want.Timeout {
			t.Errorf("%+v: options %+v, %v; want %+v", c.f, got, err, c.want)
		}
	}
}

// TestAFlagOfOneValueGivenTwice: a flag that takes one value, given twice, is a
// usage error naming both values; the last one used to win silently (`declare --file
// a.json --file b.json` declared b alone, removing a's files). Lists stay
// repeatable, and a switch, or the same value, given twice means the same.
func TestAFlagOfOneValueGivenTwice(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")
	writeTestFile(t, a, `{"files":[]}`)
	writeTestFile(t, b, `{"files":[]}`)
	for _, args := range [][]string{
		{"declare", "--data", dir, "--node", "web-1", "--file", a, "--file", b},
		{"declare", "--data", dir, "--role", "control", "--role", "worker", "--file", a},
		{"declare", "--data", dir, "--node", "web-1", "--file", a, "--wait", "30s", "--wait=1m"},
		{"token", "--data", dir, "--node", "a", "--node", "b"},
		{"token", "--data", dir, "--node", "a", "--ttl", "1m", "--ttl", "2m"},
		{"nodes", "--data", dir, "--data", dir + "2"},
	} {
		code, _, stderr := runCLI(args...)
		if code != exitUsage || !strings.Contains(stderr, "given twice") || !strings.Contains(stderr, "it takes one value") {
			t.Errorf("%v: exit %d, want %d saying the flag was given twice: %s", args, code, exitUsage, stderr)
		}
	}
	// Lists and switches: accepted (the failure is the empty data directory, 7).
	for _, args := range [][]string{
		{"declare", "--data", dir, "--node", "web-1", "--node", "web-2", "--file", a, "--json", "--json"},
		{"declare", "--data", dir, "--label", "tier=web", "--label", "zone=a", "--file", a},
		{"nodes", "--data", dir, "--state", "alive", "--state", "offline"},
		{"nodes", "--servers", "127.0.0.1:1", "--servers", "127.0.0.1:2", "--creds", a, "--ca", a},
		{"nodes", "--data", dir, "--data", dir},
	} {
		if code, _, stderr := runCLI(args...); code == exitUsage {
			t.Errorf("%v: a usage error: %s", args, stderr)
		}
	}
}

// TestMetricsListenApartFromTheNodesOwn: --metrics-listen on the port of the node's
// broker, Raft or cluster address is a usage error naming both; it took the port
// first, and the broker failed "address already in use" without naming the flag.
func TestMetricsListenApartFromTheNodesOwn(t *testing.T) {
	check := func(addr, want string, err error) {
		t.Helper()
		if want == "" {
			if err != nil {
				t.Errorf("%q: %v", addr, err)
			}
			return
		}
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want a usage error naming the %s", addr, err, want)
		}
	}
	cfg := datadir.Config{Listen: "10.0.0.1:7300", RaftListen: "10.0.0.1:7301", ClusterListen: "10.0.0.1:7302"}
	for addr, want := range map[string]string{
		"10.0.0.1:7300":  "broker (listen) address 10.0.0.1:7300",
		"0.0.0.0:7301":   "Raft (raft_listen) address 10.0.0.1:7301",
		":7302":          "cluster (cluster_listen) address 10.0.0.1:7302",
		"127.0.0.1:7300": "",
		"10.0.0.1:9300":  "",
		"":               "",
	} {
		check(addr, want, checkMetricsApart(addr, cfg))
	}
	// Compared as addresses, and a name by what it resolves to: as text,
	// localhost:7300 passed beside 127.0.0.1:7300 and took the broker's port.
	local := datadir.Config{Listen: "127.0.0.1:7300", RaftListen: "[::1]:7301", ClusterListen: "127.0.0.1:7302"}
	for addr, want := range map[string]string{
		"localhost:7300": "broker (listen) address 127.0.0.1:7300",
		"[0::1]:7301":    "Raft (raft_listen) address [::1]:7301",
		"localhost:9300": "",
	} {
		check(addr, want, checkMetricsApart(addr, local))
	}
}

// TestJoinRefusesATokenFileAnotherUserCouldWrite: a control token names the mesh
// whose CA key and signing key the node will hold, so `meshctl join` refuses a token
// file another user could have written (a local audit had root join a control node
// of that user's mesh so), exit 7, before it parses the token or writes anything;
// the user who ran meshctl through sudo counts as its own.
func TestJoinRefusesATokenFileAnotherUserCouldWrite(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving a file to another user (chown to 65534) needs root")
	}
	file := filepath.Join(t.TempDir(), "cp2.txt")
	if err := os.WriteFile(file, []byte("mesh1_garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(file, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(t.TempDir(), "cp")
	code, _, stderr := runCLIEnv(nil, "join", "--data", data, "--token-file", file)
	if code != exitDataDir || !strings.Contains(stderr, "the control token file "+file+" cannot be used: it belongs to uid 65534") {
		t.Fatalf("join with another user's token file: exit %d, %s", code, stderr)
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Errorf("the data directory was made: %v", err)
	}
	if code, _, stderr := runCLIEnv(map[string]string{"SUDO_UID": "65534"}, "join", "--data", data, "--token-file", file); code == exitDataDir {
		t.Errorf("join with the sudo user's token file: exit %d, %s", code, stderr)
	}
}

// TestDeclareRefusesAFileAnotherUserCouldWrite: what a declaration file holds
// becomes files, as root, on every node it names, so a file another user owns, or
// that others may write (a /tmp/app.json made 0666 by that user before the operator
// wrote it), is refused before anything is sent, on --file and on stdin; a file its
// group may write (umask 002) is taken with a warning, and so is another user's file
// for the user who ran meshctl through sudo as that user.
func TestDeclareRefusesAFileAnotherUserCouldWrite(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving a file to another user (chown to 65534) needs root")
	}
	dir := t.TempDir()
	body := `{"files":[{"path":"etc/app.conf","content":"x"}]}`
	file := func(name string, mode os.FileMode, uid int) string {
		p := filepath.Join(dir, name)
		writeTestFile(t, p, body)
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
		return p
	}
	data := t.TempDir() // no control node's: a declaration taken gets as far as exit 7 for it
	declare := func(env map[string]string, stdin io.Reader, f string) (int, string) {
		var out, errb bytes.Buffer
		if stdin == nil {
			stdin = strings.NewReader("")
		}
		code := run([]string{"declare", "--data", data, "--node", "web-1", "--file", f}, &cliIO{stdin: stdin, stdout: &out, stderr: &errb, getenv: func(k string) string { return env[k] }})
		return code, errb.String()
	}
	refused := func(what, stderr string) bool {
		return strings.Contains(stderr, "the declaration file "+what+" cannot be used")
	}

	theirs := file("theirs.json", 0o600, 65534)
	if code, stderr := declare(nil, nil, theirs); code != exitDataDir || !refused(theirs, stderr) || !strings.Contains(stderr, "belongs to uid 65534") {
		t.Errorf("another user's file: exit %d, %s", code, stderr)
	}
	open := file("open.json", 0o666, 0)
	if code, stderr := declare(nil, nil, open); code != exitDataDir || !refused(open, stderr) || !strings.Contains(stderr, "0666") {
		t.Errorf("a file others may write: exit %d, %s", code, stderr)
	}
	f, err := os.Open(theirs)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if code, stderr := declare(nil, f, "-"); code != exitDataDir || !refused("on stdin", stderr) {
		t.Errorf("another user's file on stdin: exit %d, %s", code, stderr)
	}

	group := file("group.json", 0o664, 0)
	if code, stderr := declare(nil, nil, group); refused(group, stderr) || !strings.Contains(stderr, "warning: the declaration file "+group+" may be written by its group") {
		t.Errorf("a file its group may write: exit %d, %s; want it taken, with a warning", code, stderr)
	}
	if code, stderr := declare(map[string]string{"SUDO_UID": "65534"}, nil, theirs); refused(theirs, stderr) {
		t.Errorf("the sudo user's own file: exit %d, %s; want it taken", code, stderr)
	}
	if code, stderr := declare(nil, strings.NewReader(body), "-"); refused("on stdin", stderr) {
		t.Errorf("a pipe: exit %d, %s; want it taken", code, stderr)
	}
}

// TestTheAddressToAddBackIsOfItsFamily: serve on a renumbered machine says how to
// give it its address back; for an IPv6 one it said ADDRESS/32 (a review), which
// adds a route to a quarter of the Internet's addresses.
func TestTheAddressToAddBackIsOfItsFamily(t *testing.T) {
	for addr, want := range map[string]string{"10.0.0.2:7300": "ADDRESS/32", "[fd37::44]:7501": "ADDRESS/128", "[::ffff:10.0.0.2]:7300": "ADDRESS/32"} {
		err := fmt.Errorf("raft: %w", busyaddr.Listened(addr, syscall.EADDRNOTAVAIL))
		if got := hostPrefix(err); got != want {
			t.Errorf("%s: %s, want %s", addr, got, want)
		}
	}
}

// TestAContextThatCannotBeUsedExitsAsItsFilesDo: a NATS context that does not
// exist, or is not JSON, exits 7 as a --creds or --ca file in that state does
// (and as one the context names): it exited 1 (a docs walkthrough).
func TestAContextThatCannotBeUsedExitsAsItsFilesDo(t *testing.T) {
	dir := t.TempDir()
	broken := filepath.Join(dir, "broken.json")
	writeTestFile(t, broken, `{"url":`)
	for _, ctx := range []string{filepath.Join(dir, "none.json"), broken} {
		code, _, stderr := runCLI("nodes", "--context", ctx)
		if code != exitDataDir || !strings.Contains(stderr, "NATS context file "+ctx+" (--context)") {
			t.Errorf("--context %s: exit %d, want %d naming the file\n%s", ctx, code, exitDataDir, stderr)
		}
		// Given by the environment, it is said to be.
		code, _, stderr = runCLIEnv(map[string]string{"MESH_CONTEXT": ctx}, "nodes")
		if code != exitDataDir || !strings.Contains(stderr, "NATS context file "+ctx+" (MESH_CONTEXT)") {
			t.Errorf("MESH_CONTEXT=%s: exit %d, want %d naming the file and the variable\n%s", ctx, code, exitDataDir, stderr)
		}
	}
}

// TestCompletionIsBoundedAsAWhole (a walkthrough): completing a node id against
// brokers that accept connections and never answer took 4 s a broker (8 s for
// two): the dial's timeout is each broker's. The whole completion ends within its
// bound, with no candidate.
func TestCompletionIsBoundedAsAWhole(t *testing.T) {
	dir := bootstrappedDir(t, "stalled")
	var addrs []string
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				t.Cleanup(func() { c.Close() }) // held open, never answered
			}
		}()
		addrs = append(addrs, ln.Addr().String())
	}
	start := time.Now()
	code, out, _ := runCLI("__complete", "revoke", "--servers", strings.Join(addrs, ","), "--creds", dir.Path(datadir.AdminCredsFile), "--ca", dir.Path(datadir.CACertFile), "")
	if took := time.Since(start); code != exitOK || took > completionTimeout+time.Second || strings.Contains(out, "web-") {
		t.Fatalf("completion against two stalled brokers: exit %d after %s, want at most %s:\n%s", code, took, completionTimeout+time.Second, out)
	}
}

// TestEnvironmentPathsExpandHome (a walkthrough): MESH_CREDS and MESH_CA written
// with ~/ (an Environment= line, a .env file: no shell to expand it) were taken as
// written, and the fault was named --creds, a flag never given. They are expanded
// as in a NATS context, and a fault is named by its variable.
func TestEnvironmentPathsExpandHome(t *testing.T) {
	dir := bootstrappedDir(t, "envhome")
	home := t.TempDir()
	for name, from := range map[string]string{"op.creds": dir.Path(datadir.AdminCredsFile), "ca.pem": dir.Path(datadir.CACertFile)} {
		data, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(home, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"HOME": home, "MESH_SERVERS": "127.0.0.1:1", "MESH_CREDS": "~/op.creds", "MESH_CA": "~/ca.pem"}
	// Read whole: what fails is the broker that is not there.
	if code, _, stderr := runCLIEnv(env, "nodes", "--leader-wait", "0"); code != exitUnreachable {
		t.Fatalf("~/ paths in the environment: exit %d, want %d (unreachable, the files read):\n%s", code, exitUnreachable, stderr)
	}
	env["MESH_CREDS"] = "~/nope.creds"
	if code, _, stderr := runCLIEnv(env, "nodes", "--leader-wait", "0"); code != exitDataDir || !strings.Contains(stderr, "the creds file "+home+"/nope.creds (MESH_CREDS)") || strings.Contains(stderr, "(--creds)") {
		t.Fatalf("a MESH_CREDS that does not exist: exit %d, want %d naming MESH_CREDS:\n%s", code, exitDataDir, stderr)
	}
}
