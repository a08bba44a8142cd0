package operator

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"mesh/controlplane/bootstrap"
	"mesh/controlplane/datadir"
	"mesh/controlplane/pki"
	"mesh/host/jsonkeys"
	"mesh/host/statedir"
)

// tlsBroker runs a nats-server that speaks TLS first with a leaf of a fresh CA, as
// a mesh broker does, and returns its address and that CA's certificate file.
func tlsBroker(t *testing.T) (addr, caFile string) {
	t.Helper()
	return tlsBrokerWith(t, func(*server.Options) {})
}

// tlsBrokerWith is tlsBroker with its options changed by change.
func tlsBrokerWith(t *testing.T, change func(*server.Options)) (addr, caFile string) {
	t.Helper()
	ca, _, err := pki.NewCA("m", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	s := brokerOf(t, ca, "cp-1", change)
	return s.Addr().String(), caFileOf(t, ca)
}

// brokerOf starts a broker named name with a TLS identity ca issued, its options
// changed by change.
func brokerOf(t *testing.T, ca *pki.CA, name string, change func(*server.Options)) *server.Server {
	t.Helper()
	leaf, err := ca.IssueLeaf(name, []net.IP{net.IPv4(127, 0, 0, 1)}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pki.ServerConfig(leaf, ca.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	opts := &server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		TLSConfig: cfg, TLS: true, TLSHandshakeFirst: true, AllowNonTLS: false}
	change(opts)
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(s.Shutdown)
	if !s.ReadyForConnections(5 * time.Second) {
		t.Fatal("broker not ready")
	}
	return s
}

// caFileOf writes ca's certificate to a file, and returns its path.
func caFileOf(t *testing.T, ca *pki.CA) string {
	t.Helper()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	writeFile(t, caFile, ca.CertPEM)
	return caFile
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func credsFile(t *testing.T) string {
	t.Helper()
	account, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	creds, err := bootstrap.OperatorCreds(account, "test")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "admin.creds")
	writeFile(t, path, creds)
	return path
}

// TestCAEndpointChecksThePin: an operator's machine that holds only the creds and the
// CA computes the pin from the CA and refuses a broker of another CA in the handshake.
func TestCAEndpointChecksThePin(t *testing.T) {
	addr, caFile := tlsBroker(t)
	_, otherCA := tlsBroker(t)
	creds := credsFile(t)

	e, err := CAEndpoint([]string{addr}, creds, caFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := DialEndpoint(e, Options{})
	if err != nil {
		t.Fatalf("the broker proves the CA given, and was refused: %v", err)
	}
	c.Close()

	e, err = CAEndpoint([]string{addr}, creds, otherCA)
	if err != nil {
		t.Fatal(err)
	}
	_, err = DialEndpoint(e, Options{})
	if !errors.Is(err, pki.ErrPinMismatch) || !errors.Is(err, ErrUnreachable) {
		t.Fatalf("a broker of another CA: want ErrPinMismatch, got %v", err)
	}
}

func TestCAEndpointRefusesWhatItCannotUse(t *testing.T) {
	_, caFile := tlsBroker(t)
	creds := credsFile(t)
	leafOnly := filepath.Join(t.TempDir(), "leaf.pem")
	now := time.Now()
	ca, _, _ := pki.NewCA("m", now)
	leaf, _ := ca.IssueLeaf("x", nil, now)
	writeFile(t, leafOnly, leaf.CertPEM)
	cases := []struct {
		name        string
		servers     []string
		creds, ca   string
		wantMessage string
	}{
		{"no servers", nil, creds, caFile, "no broker address"},
		{"no creds file", []string{"127.0.0.1:1"}, "/nonexistent/admin.creds", caFile, "creds file"},
		{"no CA file", []string{"127.0.0.1:1"}, creds, "/nonexistent/ca.pem", "CA file"},
		{"CA file is not PEM", []string{"127.0.0.1:1"}, creds, creds, "no PEM certificate"},
		{"a leaf, not a CA", []string{"127.0.0.1:1"}, creds, leafOnly, "not a CA certificate"},
	}
	for _, c := range cases {
		_, err := CAEndpoint(c.servers, c.creds, c.ca)
		if !errors.Is(err, ErrEndpoint) || !strings.Contains(err.Error(), c.wantMessage) {
			t.Errorf("%s: want ErrEndpoint saying %q, got %v", c.name, c.wantMessage, err)
		}
	}
}

func TestParseServers(t *testing.T) {
	got, err := ParseServers("tls://10.0.0.1:7300, 10.0.0.2:7300", "nats://cp-3.example:7300")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.1:7300", "10.0.0.2:7300", "cp-3.example:7300"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("got %v, want %v", got, want)
	}
	for _, bad := range []string{"ws://10.0.0.1:7300", "10.0.0.1", ":7300"} {
		if _, err := ParseServers(bad); !errors.Is(err, ErrEndpoint) {
			t.Errorf("%q: want ErrEndpoint, got %v", bad, err)
		} else if strings.Contains(err.Error(), "credentials") {
			// A mistyped address is not the credentials' fault.
			t.Errorf("%q: %v blames the credentials", bad, err)
		}
	}
}

func TestLoadContext(t *testing.T) {
	home := t.TempDir()
	env := map[string]string{"HOME": home}
	getenv := func(k string) string { return env[k] }
	dir := filepath.Join(home, ".config", "nats", "context")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "prod.json"), []byte(`{"description":"the mesh","url":"tls://10.0.0.1:7300,tls://10.0.0.2:7300","creds":"~/mesh/admin.creds","ca":"/etc/mesh/ca.pem","tls_first":true}`))
	c, err := LoadContext("prod", getenv)
	if err != nil {
		t.Fatal(err)
	}
	if c.URL != "tls://10.0.0.1:7300,tls://10.0.0.2:7300" || c.Creds != filepath.Join(home, "mesh", "admin.creds") || c.CA != "/etc/mesh/ca.pem" {
		t.Fatalf("context read as %+v", c)
	}
	// XDG_CONFIG_HOME moves the directory, as it does for the nats CLI.
	xdg := t.TempDir()
	env["XDG_CONFIG_HOME"] = xdg
	if p, _ := ContextPath("prod", getenv); p != filepath.Join(xdg, "nats", "context", "prod.json") {
		t.Fatalf("with XDG_CONFIG_HOME: %s", p)
	}
	// A missing or damaged context is an unusable input file, as the files it
	// names are (meshctl exits 7 for both; it exited 1).
	if _, err := LoadContext("prod", getenv); !errors.Is(err, ErrEndpoint) || !errors.Is(err, ErrUnusableFile) || !errors.Is(err, datadir.ErrMissing) || !strings.Contains(err.Error(), "nats context add") {
		t.Fatalf("a missing context: %v", err)
	}
	// A path is taken as it is.
	if c, err := LoadContext(filepath.Join(dir, "prod.json"), getenv); err != nil || c.CA != "/etc/mesh/ca.pem" {
		t.Fatalf("context by path: %+v %v", c, err)
	}
	writeFile(t, filepath.Join(dir, "broken.json"), []byte(`{"url":`))
	if _, err := LoadContext(filepath.Join(dir, "broken.json"), getenv); !errors.Is(err, ErrEndpoint) || !errors.Is(err, datadir.ErrCorrupt) || !strings.Contains(err.Error(), "not valid JSON") {
		t.Fatalf("a broken context: %v", err)
	}
	// Two urls: refused, not the last taken. A member in another case is the nats
	// CLI's to accept (Go's decoder does), and is read.
	writeFile(t, filepath.Join(dir, "twice.json"), []byte(`{"url":"tls://10.0.0.1:7300","creds":"/c","ca":"/a","url":"tls://203.0.113.9:7300"}`))
	if _, err := LoadContext(filepath.Join(dir, "twice.json"), getenv); !errors.Is(err, ErrEndpoint) || !errors.Is(err, jsonkeys.ErrDuplicate) || !errors.Is(err, datadir.ErrCorrupt) || !strings.Contains(err.Error(), `"url" appears twice`) {
		t.Fatalf("a context with two urls: %v", err)
	}
	writeFile(t, filepath.Join(dir, "case.json"), []byte(`{"URL":"tls://10.0.0.1:7300","creds":"/c","ca":"/a"}`))
	if c, err := LoadContext(filepath.Join(dir, "case.json"), getenv); err != nil || c.URL != "tls://10.0.0.1:7300" {
		t.Fatalf("a context with URL in capitals: %+v %v", c, err)
	}
}

// TestDialWaitsForAFullBroker: a broker at its connection limit (nats-server's
// max_connections) refuses before the TLS handshake; the operator's dial tries again
// until a connection closes, within the leader wait, and gives up after it. Anything
// else that is not TLS fails at once.
func TestDialWaitsForAFullBroker(t *testing.T) {
	addr, caFile := tlsBrokerWith(t, func(o *server.Options) { o.MaxConn = 1 })
	creds := credsFile(t)
	e, err := CAEndpoint([]string{addr}, creds, caFile)
	if err != nil {
		t.Fatal(err)
	}
	holder, err := DialEndpoint(e, Options{})
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	_, err = DialEndpoint(e, Options{LeaderWait: 800 * time.Millisecond})
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "first record does not look like a TLS handshake") {
		t.Fatalf("a broker full all along: %v", err)
	}
	if d := time.Since(start); d < 500*time.Millisecond || d > 3*time.Second {
		t.Fatalf("a broker full all along was tried for %s, want about the leader wait (800ms)", d)
	}

	time.AfterFunc(500*time.Millisecond, holder.Close)
	start = time.Now()
	c, err := DialEndpoint(e, Options{})
	if err != nil {
		t.Fatalf("a broker full for 500 ms: %v", err)
	}
	c.Close()
	if d := time.Since(start); d < 400*time.Millisecond {
		t.Fatalf("connected after %s, before the broker had room", d)
	}

	// Not a broker refusing for room: no retry.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.Write([]byte("HTTP/1.0 400 Bad Request\r\n\r\n"))
			conn.Close()
		}
	}()
	e.Servers = []string{ln.Addr().String()}
	start = time.Now()
	if _, err := DialEndpoint(e, Options{}); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("an HTTP server: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("an HTTP server was tried for %s: only a broker refusing for room is tried again", d)
	}
}

// controlDir makes a control node's data directory of cfg, with operator
// credentials.
func controlDir(t *testing.T, cfg datadir.Config) datadir.Dir {
	t.Helper()
	d := datadir.Dir(t.TempDir())
	if err := d.SaveConfig(cfg); err != nil {
		t.Fatal(err)
	}
	creds, err := os.ReadFile(credsFile(t))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, d.Path(datadir.AdminCredsFile), creds)
	return d
}

// TestDirEndpointNamesEachBrokerOnce: a control node's own broker is in the list of
// brokers too; it is tried first and named once (an unreachable control plane's
// error lists the addresses tried).
func TestDirEndpointNamesEachBrokerOnce(t *testing.T) {
	d := controlDir(t, datadir.Config{Mesh: "m", Node: "cp-2", Listen: "127.0.0.2:7300",
		Brokers: []string{"127.0.0.1:7300", "127.0.0.2:7300", "127.0.0.3:7300"}, CAPin: strings.Repeat("ab", 32)})
	e, err := DirEndpoint(d, false)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"127.0.0.2:7300", "127.0.0.1:7300", "127.0.0.3:7300"}
	if !slices.Equal(e.Servers, want) {
		t.Fatalf("servers %v, want %v", e.Servers, want)
	}
}

// TestDirEndpointOfARemovedNode: a removed control node's data directory names no
// serve to check when nothing answers: that node will not serve again.
func TestDirEndpointOfARemovedNode(t *testing.T) {
	d := controlDir(t, datadir.Config{Mesh: "m", Node: "cp-2", Listen: "127.0.0.2:7300", Brokers: []string{"127.0.0.2:7300"}, CAPin: strings.Repeat("ab", 32)})
	e, err := DirEndpoint(d, false)
	if err != nil || !strings.Contains(e.Hint, "is `meshctl serve --data") {
		t.Fatalf("an active node's hint: %q, %v", e.Hint, err)
	}
	if err := d.MarkRemoved("cp-2", time.Now()); err != nil {
		t.Fatal(err)
	}
	e, err = DirEndpoint(d, false)
	if err != nil || strings.Contains(e.Hint, "running?") || !strings.Contains(e.Hint, "removed from the mesh") || !strings.Contains(e.Hint, "--servers") {
		t.Fatalf("a removed node's hint: %q, %v", e.Hint, err)
	}
}

// TestDirEndpointOfAJoiningNode: a node still joining has no serve of its own to
// check: when nothing answers, the hint names the other control nodes and says that
// the join resumes (it asked whether the joining node's serve ran).
func TestDirEndpointOfAJoiningNode(t *testing.T) {
	d := controlDir(t, datadir.Config{Mesh: "m", Node: "cp-2", Listen: "127.0.0.2:7300", Brokers: []string{"127.0.0.1:7300"}, CAPin: strings.Repeat("ab", 32), Joining: true})
	e, err := DirEndpoint(d, true)
	if err != nil || strings.Contains(e.Hint, "running?") || !strings.Contains(e.Hint, "other control nodes' brokers") || !strings.Contains(e.Hint, "resumes") {
		t.Fatalf("a joining node's hint: %q, %v", e.Hint, err)
	}
}

// TestCredsOthersMayReadAreRefused: an operator's machine with admin.creds of mode
// 0644 logged in with it silently, where serve refuses its own and ssh a private key
// others may read; every local user of that machine could log in as an operator.
func TestCredsOthersMayReadAreRefused(t *testing.T) {
	ca, _, err := pki.NewCA("m", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	caFile := caFileOf(t, ca)
	creds := credsFile(t)
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604} {
		if err := os.Chmod(creds, mode); err != nil {
			t.Fatal(err)
		}
		_, err := CAEndpoint([]string{"127.0.0.1:1"}, creds, caFile)
		if !errors.Is(err, ErrCredsExposed) || !errors.Is(err, ErrEndpoint) || !strings.Contains(err.Error(), "chmod 600 "+creds) {
			t.Errorf("creds of mode %v: %v, want ErrCredsExposed naming the fix", mode, err)
		}
	}
	if err := os.Chmod(creds, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := CAEndpoint([]string{"127.0.0.1:1"}, creds, caFile); err != nil {
		t.Errorf("creds of mode 0600: %v", err)
	}
}

// TestTrustedFilesAnotherUserCouldWriteAreRefused: the CA file an operator's
// machine pins, and a NATS context naming brokers, credentials and CA, are refused
// when another user could have written them (group or others may write, or another
// user owns them), as `meshhost enrol` refuses such a token file: a local audit had
// root mint a host token for another user's mesh through a context file of theirs.
// The user who ran meshctl through sudo counts as its own.
func TestTrustedFilesAnotherUserCouldWriteAreRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving a file to another user (chown to 65534) needs root")
	}
	_, caFile := tlsBroker(t)
	creds := credsFile(t)
	data, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	place := func(name string, mode os.FileMode, uid int, content []byte) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, content, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		file string
		why  string
	}{
		{place("open.pem", 0o666, 0, data), "has mode 0666: group or others may write it"},
		{place("theirs.pem", 0o644, 65534, data), "belongs to uid 65534"},
	} {
		_, err := CAEndpoint([]string{"127.0.0.1:1"}, creds, c.file)
		if !errors.Is(err, statedir.ErrUnsafePath) || !strings.Contains(err.Error(), c.why) || !strings.Contains(err.Error(), "another mesh's CA certificate") {
			t.Errorf("CA file %s: %v, want ErrUnsafePath saying %q", c.file, err, c.why)
		}
	}
	t.Setenv("SUDO_UID", "65534")
	if _, err := CAEndpoint([]string{"127.0.0.1:1"}, creds, filepath.Join(dir, "theirs.pem")); err != nil {
		t.Errorf("the CA file of the user who ran sudo: %v", err)
	}
	t.Setenv("SUDO_UID", "")
	ctx := place("ops.json", 0o666, 0, []byte(`{"url":"tls://127.0.0.1:1","creds":"`+creds+`","ca":"`+caFile+`"}`))
	if _, err := LoadContext(ctx, os.Getenv); !errors.Is(err, statedir.ErrUnsafePath) || !strings.Contains(err.Error(), "the NATS context") {
		t.Errorf("a context others may write: %v, want ErrUnsafePath", err)
	}
}

// TestDialWaitsForABrokerThatOpens (audit of the control plane's weeks, finding 7):
// a control node opens its broker only once a leader is known, and during a
// restart of every control node meshctl exited 3 within milliseconds ("no servers
// available"). A dial refused everywhere is tried again within the leader wait; with
// none (0), it fails at once.
func TestDialWaitsForABrokerThatOpens(t *testing.T) {
	ca, _, err := pki.NewCA("m", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // refused until the broker opens it
	e, err := CAEndpoint([]string{ln.Addr().String()}, credsFile(t), caFileOf(t, ca))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := DialEndpoint(e, Options{LeaderWait: -1}); !errors.Is(err, ErrUnreachable) || time.Since(start) > time.Second {
		t.Fatalf("no leader wait: %v after %s, want unreachable at once", err, time.Since(start))
	}
	type dialled struct {
		c   *Client
		err error
		d   time.Duration
	}
	got := make(chan dialled, 1)
	start = time.Now()
	go func() {
		c, err := DialEndpoint(e, Options{LeaderWait: 10 * time.Second})
		got <- dialled{c, err, time.Since(start)}
	}()
	time.Sleep(700 * time.Millisecond)
	brokerOf(t, ca, "cp-1", func(o *server.Options) { o.Port = port })
	r := <-got
	if r.err != nil {
		t.Fatalf("a broker that opens after 700 ms: %v", r.err)
	}
	r.c.Close()
	if r.d < 600*time.Millisecond {
		t.Fatalf("connected after %s, before the broker opened", r.d)
	}
}
