package broker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"mesh/logging"
)

var _ server.Logger = (*natsLog)(nil)

func jsonRecords(t *testing.T, out *bytes.Buffer) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for line := range strings.Lines(out.String()) {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("a log line is not one JSON object: %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	return recs
}

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// TestNATSLogLevels: each of nats-server's levels is a record at its own slog level,
// with the component; a fatal line is an error marked fatal; trace lines come, at
// debug, only when the logger is at debug.
func TestNATSLogLevels(t *testing.T) {
	for _, debug := range []bool{false, true} {
		var out bytes.Buffer
		level := slog.LevelInfo
		if debug {
			level = slog.LevelDebug
		}
		l := newNATSLog(slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: level})), nil)
		if l.debug != debug {
			t.Errorf("at %s the adapter's debug is %v", level, l.debug)
		}
		l.Noticef("Server is ready on %s", "127.0.0.1:4222")
		l.Warnf("w %d", 1)
		l.Errorf("e %d", 2)
		l.Fatalf("f %d", 3)
		l.Debugf("d %d", 4)
		l.Tracef("t %d", 5)
		want := map[string]string{"Server is ready on 127.0.0.1:4222": "INFO", "w 1": "WARN", "e 2": "ERROR", "f 3": "ERROR"}
		if debug {
			want["d 4"], want["t 5"] = "DEBUG", "DEBUG"
		}
		recs := jsonRecords(t, &out)
		if len(recs) != len(want) {
			t.Errorf("debug %v: %d lines, want %d:\n%s", debug, len(recs), len(want), out.String())
		}
		for _, r := range recs {
			msg, _ := r["msg"].(string)
			if r["level"] != want[msg] || r["component"] != "broker" {
				t.Errorf("debug %v: line %v, want level %q and component broker", debug, r, want[msg])
			}
			if (msg == "f 3") != (r["fatal"] == true) {
				t.Errorf("line %v: fatal is for Fatalf alone", r)
			}
			if (msg == "t 5") != (r["trace"] == true) {
				t.Errorf("line %v: trace is for Tracef alone", r)
			}
		}
	}
}

// TestNATSLogRepeats: an error repeats under one format string with a new attempt
// number and address each time (a route to a peer that is down); it is logged once an
// interval, and the next line says how many were held back. So is a connection's error,
// whose format has the connection (numbers) baked in. Lines that differ by more than
// numbers (the errors) are kinds of their own. Permissions violations are logged as
// client events (TestClientEvents): the first few of an interval, each with its subject.
func TestNATSLogRepeats(t *testing.T) {
	var out bytes.Buffer
	c := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	l := newNATSLog(slog.New(slog.NewJSONHandler(&out, nil)), logging.NewLimiter(10*time.Second, c.now))
	const routeErr = "Error trying to connect to route (attempt %v): %v"
	for i := range 20 {
		l.Errorf(routeErr, i+1, "dial tcp 10.0.0."+string(rune('2'+i%3))+":6222: connect: connection refused")
		l.Errorf(fmt.Sprintf("127.0.0.1:%d - rid:%d - TLS route handshake error: %%v", 50000+i, 5+i), "remote error: tls: bad certificate")
		l.Errorf("%s - %s", fmt.Sprintf("rid:%d", i), "TLS handshake error")
		l.Errorf("%s - %s", fmt.Sprintf("rid:%d", i), "connection reset")
		l.Noticef("Route connection created for %s", "10.0.0.2:6222")
		c.t = c.t.Add(time.Second)
	}
	// A storm's readloop stalls and slow consumers, each of another connection.
	for i := range 500 {
		l.Warnf(fmt.Sprintf(`127.0.0.1:%d - cid:%d - "v1.55.0:go:meshhost h-%05d" - "AHOSTS/nkey:U%c%cKEY" - Readloop processing time: %%v`, 30000+i, i, i, 'A'+i%26, 'A'+i/26%26), 2*time.Second+time.Duration(i)*time.Millisecond)
		l.Warnf(fmt.Sprintf(`127.0.0.1:%d - cid:%d - "U%c%cKEY" - Slow Consumer Detected: WriteDeadline of %%v exceeded with %%d chunks of %%d total bytes.`, 30000+i, i, 'A'+i%26, 'A'+i/26%26), 10*time.Second, i, 1000*i)
	}
	// Two clients' violations of the same subject, and one client's of two subjects.
	l.Errorf(`127.0.0.1:40001 - cid:10 - "UOTHER" - Publish Violation - Subject %q`, "mesh.node.victim.decl")
	l.Errorf(`127.0.0.1:40000 - cid:9 - "UEVIL" - Publish Violation - Subject %q`, "mesh.node.victim.decl")
	l.Errorf(`127.0.0.1:40000 - cid:9 - "UEVIL" - Publish Violation - Subject %q`, "mesh.admin.nodes")
	l.Errorf(routeErr, 21, "dial tcp 10.0.0.3:6222: connect: connection refused")

	byKind := map[string][]map[string]any{}
	for _, r := range jsonRecords(t, &out) {
		k := kindOf(r["msg"].(string))
		byKind[k] = append(byKind[k], r)
	}
	// 21 route errors over 20 s: at 0 s, at 10 s (9 held back), at 20 s (9 more).
	route := byKind[kindOf("Error trying to connect to route (attempt 1): dial tcp 10.0.0.2:6222: connect: connection refused")]
	if len(route) != 3 {
		t.Fatalf("the route error was logged %d times, want 3:\n%s", len(route), out.String())
	}
	if _, ok := route[0][logging.SuppressedKey]; ok || route[1][logging.SuppressedKey] != float64(9) || route[2][logging.SuppressedKey] != float64(9) {
		t.Errorf("suppressed counts %v, %v, %v; want none, 9, 9", route[0][logging.SuppressedKey], route[1][logging.SuppressedKey], route[2][logging.SuppressedKey])
	}
	if !strings.Contains(route[1]["msg"].(string), "(attempt 11)") {
		t.Errorf("the line after the interval is %q, want the attempt it reports", route[1]["msg"])
	}
	for line, want := range map[string]int{
		"127.0.0.1:1 - rid:1 - TLS route handshake error: remote error: tls: bad certificate": 2,
		"rid:1 - TLS handshake error": 2,
		"rid:1 - connection reset":    2,
		`127.0.0.1:1 - cid:1 - "v1.55.0:go:meshhost h-00001" - "AHOSTS/nkey:UZZKEY" - Readloop processing time: 2.5s`:            1,
		`127.0.0.1:1 - cid:1 - "UZZKEY" - Slow Consumer Detected: WriteDeadline of 10s exceeded with 1 chunks of 1 total bytes.`: 1,
		"Route connection created for 10.0.0.2:6222": 20,
	} {
		if n := len(byKind[kindOf(line)]); n != want {
			t.Errorf("lines like %q were logged %d times, want %d", line, n, want)
		}
	}
	var subjects []any
	for _, r := range byKind[kindOf("Publish Violation - Subject")] {
		subjects = append(subjects, r["subject"])
	}
	if want := []any{"mesh.node.victim.decl", "mesh.node.victim.decl", "mesh.admin.nodes"}; fmt.Sprint(subjects) != fmt.Sprint(want) {
		t.Errorf("the violations logged name %v, want %v", subjects, want)
	}
}

func TestKindOf(t *testing.T) {
	for msg, want := range map[string]string{
		"Error trying to connect to route (attempt 12): dial tcp 10.0.0.2:6222: connect: connection refused":        "Error trying to connect to route (attempt #): dial tcp #.#.#.#:#: connect: connection refused",
		"10.0.0.2:6222 - rid:17 - TLS route handshake error: EOF":                                                   "#.#.#.#:# - rid:# - TLS route handshake error: ",
		"10.0.0.2:6222 - rid:18 - TLS route handshake error: x509: unknown authority (CN=evil 1 SHA-256: ab)":       "#.#.#.#:# - rid:# - TLS route handshake error: ",
		`127.0.0.1:40000 - cid:9 - "UABC" - Client parser ERROR, state=0, i=0: proto='"GET / HTTP/1.1\r\nHost"...'`: `#.#.#.#:# - cid:# - "…" - Client parser ERROR, state=#, i=#: proto='"…"...'`,
		`127.0.0.1:4 - cid:5 - "meshhost h-1" - "A/nkey:UXY" - Readloop processing time: 2.038821699s`:              ` - Readloop processing time: #.#s`,
		`127.0.0.1:4 - cid:5 - "UXY" - Slow Consumer Detected: MaxPending of 67108864 Exceeded`:                     ` - Slow Consumer Detected: MaxPending of # Exceeded`,
		// IPv6 sources: the hex digits of an address are no kind of their own (a
		// stranger's failed handshakes from a /64 filled the limiter's kinds).
		"[2001:db8:1:2::a:bcde]:40000 - cid:7 - TLS handshake error: tls: client offered only unsupported versions": "[#]:# - cid:# - TLS handshake error: ",
		"[fe80::1%eth0]:6222 - rid:3 - TLS route handshake error: EOF":                                              "[#]:# - rid:# - TLS route handshake error: ",
		"Error trying to connect to route (attempt 2): dial tcp [2001:db8::2]:6222: connect: connection refused":    "Error trying to connect to route (attempt #): dial tcp [#]:#: connect: connection refused",
		"a list [not an address] and [::1]": "a list [not an address] and [#]",
	} {
		if got := kindOf(msg); got != want {
			t.Errorf("kindOf(%q) = %q, want %q", msg, got, want)
		}
	}
}

// TestClientEventsAreWarnings: what a client did (a publish or subscription its
// grant does not allow, a refused login, a client error), which nats-server logs as
// errors, is logged as a warning: nothing failed on the control node, every such
// event is counted in mesh_broker_client_violations_total or
// mesh_broker_connections_refused_total, and a scanner or a compromised host must
// not page whoever alerts on the control node's errors. The broker's own errors stay
// errors, but for a route to another control node it could not dial, which every
// rolling restart made (routeDialFormat): a warning.
func TestClientEventsAreWarnings(t *testing.T) {
	var out bytes.Buffer
	l := newNATSLog(slog.New(slog.NewJSONHandler(&out, nil)), nil)
	l.Errorf(`127.0.0.1:40000 - cid:9 - "UEVIL" - Publish Violation - Subject %q`, "mesh.node.victim.decl")
	l.Errorf(`127.0.0.1:40000 - cid:9 - "UEVIL" - Subscription Violation - Subject "mesh.node.victim.decl", SID 1`)
	l.Errorf("%v - %s", server.ErrAuthentication, `127.0.0.1:40001 - cid:10 - "guess"`)
	l.Errorf("Error trying to connect to route (attempt %v): %v", 3, "connection refused")
	want := map[string]string{"Publish Violation - Subject": "WARN", "Subscription Violation - Subject": "WARN",
		server.ErrAuthentication.Error(): "WARN", "Error trying to connect to route (attempt 3): connection refused": "WARN"}
	recs := jsonRecords(t, &out)
	if len(recs) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(recs), len(want), out.String())
	}
	for _, r := range recs {
		msg, _ := r["msg"].(string)
		if r["level"] != want[msg] {
			t.Errorf("%q at %v, want %s", msg, r["level"], want[msg])
		}
	}
}

// TestByDesignWarningsAreInfo: the warnings nats-server gives at every start about what
// this broker chose are info lines, and nats-server still gives each, word for word, at
// WARN (its source, as this module builds it).
func TestByDesignWarningsAreInfo(t *testing.T) {
	var out bytes.Buffer
	l := newNATSLog(slog.New(slog.NewJSONHandler(&out, nil)), nil)
	for _, format := range byDesign {
		l.Warnf(format)
	}
	l.Warnf("another warning")
	recs := jsonRecords(t, &out)
	if len(recs) != len(byDesign)+1 {
		t.Fatalf("%d lines, want %d:\n%s", len(recs), len(byDesign)+1, out.String())
	}
	for i, r := range recs {
		want := "INFO"
		if i == len(byDesign) {
			want = "WARN"
		}
		if r["level"] != want {
			t.Errorf("%q logged at %v, want %s", r["msg"], r["level"], want)
		}
	}

	src := natsServerSource(t, "*.go")
	for _, format := range byDesign {
		if !strings.Contains(src, "Warnf("+strconv.Quote(format)+")") {
			t.Errorf("nats-server no longer warns %q: update byDesign", format)
		}
	}
	// The route dial's line, made a warning (routeDialFormat), is one nats-server
	// still logs as an error: reworded, it would be an error again unnoticed.
	if !strings.Contains(src, strconv.Quote(routeDialFormat)) {
		t.Errorf("nats-server no longer logs %q: update routeDialFormat", routeDialFormat)
	}
}

// natsServerSource is the source of nats-server's server package as this module builds
// it: the files matching pattern, tests left out. The test is skipped if the source
// cannot be found (no module cache, no go command).
func natsServerSource(t *testing.T, pattern string) string {
	t.Helper()
	dir, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/nats-io/nats-server/v2").Output()
	if err != nil {
		t.Skipf("cannot locate nats-server's source (go list -m: %v)", err)
	}
	files, err := filepath.Glob(filepath.Join(strings.TrimSpace(string(dir)), "server", pattern))
	if err != nil {
		t.Fatal(err)
	}
	var src strings.Builder
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
	}
	if src.Len() == 0 {
		t.Skipf("no Go source matching %s in nats-server's module directory", pattern)
	}
	return src.String()
}

// TestStrangersOnTheRoutePortAreBounded: a stranger's connections to the route port
// that fail their handshake made two lines each: the failure, an error whose kind
// held the certificate subject the stranger chose (a new kind, so a new line, each
// time), and a notice that the route closed, which no limiter saw (26,000 lines in
// 10 s in an audit). Both are bounded now, and the failure is a warning: a stranger
// reaching a port is not the control node's error.
func TestStrangersOnTheRoutePortAreBounded(t *testing.T) {
	var out bytes.Buffer
	c := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	l := newNATSLog(slog.New(slog.NewJSONHandler(&out, nil)), logging.NewLimiter(10*time.Second, c.now))
	for i := range 1000 {
		l.Errorf(fmt.Sprintf("127.0.0.1:%d - rid:%d - TLS route handshake error: %%v%%s", 40000+i, i), "x509: certificate signed by unknown authority",
			fmt.Sprintf(" (CN=stranger %d,O=x SHA-256: %064x)", i, i))
		l.Noticef(fmt.Sprintf("127.0.0.1:%d - rid:%d - Router connection closed: %%s", 40000+i, i), "TLS Handshake Failure")
	}
	recs := jsonRecords(t, &out)
	if len(recs) != 1+noticesPerInterval {
		t.Fatalf("%d lines for 1,000 strangers' connections in one interval, want %d:\n%s", len(recs), 1+noticesPerInterval, out.String())
	}
	for _, r := range recs {
		if msg := r["msg"].(string); strings.Contains(msg, "handshake error") && r["level"] != "WARN" {
			t.Errorf("a stranger's failed handshake logged at %v: %s", r["level"], msg)
		}
	}
	// The next interval says how many were held back.
	c.t = c.t.Add(11 * time.Second)
	out.Reset()
	l.Noticef("127.0.0.1:1 - rid:1 - Router connection closed: %s", "TLS Handshake Failure")
	if recs := jsonRecords(t, &out); len(recs) != 1 || recs[0][logging.SuppressedKey] != float64(1000-noticesPerInterval) {
		t.Fatalf("the next interval's line: %v, want the count held back", recs)
	}
}

// TestStrangersFromIPv6AreBounded: the same as over IPv4 (above), from 2,000 IPv6
// addresses of one /64 whose hex digits differ: one line in the interval, and a
// warning of another kind right after is logged. Each address was a kind of its own
// (its letters survived the digits' folding): 1,024 lines, the limiter's kinds all
// taken, and a real route failure after them held back (found by an audit).
func TestStrangersFromIPv6AreBounded(t *testing.T) {
	var out bytes.Buffer
	c := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	l := newNATSLog(slog.New(slog.NewJSONHandler(&out, nil)), logging.NewLimiter(10*time.Second, c.now))
	const hex = "abcdef"
	for i := range 2000 {
		group := string([]byte{hex[i%6], hex[i/6%6], hex[i/36%6], hex[i/216%6]})
		l.Errorf(fmt.Sprintf("[2001:db8:1:2::%c:%s]:%d - cid:%d - TLS handshake error: %%v%%s", hex[i/1296%6], group, 40000+i, 100+i),
			errors.New("tls: first record does not look like a TLS handshake"), "")
	}
	if recs := jsonRecords(t, &out); len(recs) != 1 {
		t.Fatalf("%d lines for 2,000 strangers' handshakes from IPv6 in one interval, want 1", len(recs))
	}
	out.Reset()
	l.Warnf("Error trying to connect to route (attempt %v): %v", 1, errors.New("dial tcp [2001:db8::2]:7302: connect: connection refused"))
	if recs := jsonRecords(t, &out); len(recs) != 1 || !strings.Contains(recs[0]["msg"].(string), "Error trying to connect to route") {
		t.Fatalf("a route failure after the strangers' handshakes: %v, want it logged", recs)
	}
}

// TestASystemImportThereAlreadyIsInfo: nats-server's race setting up an account's
// system imports (found in a soak of rolling restarts: "duplicate service import
// subject", the same import already there) is an info line; the same line about
// another import, or another failure, stays an error. The line's format and the
// error's are checked against nats-server's source, so that a release that rewords
// either fails here: sameSysImport reads the error's text, as nats-server gives no
// typed error for it, and reworded it would be an error line again unnoticed.
func TestASystemImportThereAlreadyIsInfo(t *testing.T) {
	// dupImportError is nats-server's error for an import there already (accounts.go,
	// addServiceImport): the subject imported, the account, the subject it maps to.
	const dupImportError = "duplicate service import subject %q, previously used in import for account %q, subject %q"
	var out bytes.Buffer
	l := newNATSLog(slog.New(slog.NewJSONHandler(&out, nil)), nil)
	const subj, mapped = "$SYS.REQ.ACCOUNT.PING.STATZ", "$SYS.REQ.ACCOUNT.ACGIRG.STATZ"
	l.Errorf(sysImportFormat, subj, mapped, fmt.Errorf(dupImportError, subj, "AA2YKT", mapped))
	l.Errorf(sysImportFormat, subj, mapped, fmt.Errorf(dupImportError, subj, "AA2YKT", "$SYS.REQ.ACCOUNT.OTHER.STATZ"))
	l.Errorf(sysImportFormat, subj, mapped, fmt.Errorf("missing account"))
	recs := jsonRecords(t, &out)
	if len(recs) != 3 {
		t.Fatalf("%d lines, want 3:\n%s", len(recs), out.String())
	}
	for i, want := range []string{"INFO", "ERROR", "ERROR"} {
		if recs[i]["level"] != want {
			t.Errorf("%q logged at %v, want %s", recs[i]["msg"], recs[i]["level"], want)
		}
	}

	if src := natsServerSource(t, "events.go"); !strings.Contains(src, strconv.Quote(sysImportFormat)) {
		t.Errorf("nats-server's events.go no longer logs %q: update sysImportFormat", sysImportFormat)
	}
	if src := natsServerSource(t, "accounts.go"); !strings.Contains(src, "fmt.Errorf("+strconv.Quote(dupImportError)+",") {
		t.Errorf("nats-server's accounts.go no longer gives the error %q: update sameSysImport", dupImportError)
	}
}

// TestMatchedTextsAreNATSServers: the texts the broker recognises nats-server's lines by
// where nats-server gives nothing but text (handshakeFailed, loadSignals) are in the
// lines nats-server logs, word for word in its source as this module builds it. A
// release that rewords one fails here: otherwise a stranger's failed handshakes would
// be errors again, each a kind of its own, and a reconnect storm's readloop stalls a
// line for each connection, unnoticed.
func TestMatchedTextsAreNATSServers(t *testing.T) {
	// A client's lines are its connection, " - ", and the format (client.format).
	const clientFormat = `fmt.Sprintf("%s - %s", s, format)`
	const conn = `127.0.0.1:40000 - cid:9 - "UXY"`
	lines := []struct {
		format string // as in client.go
		args   []any
		by     string // what of the broker's recognises it
	}{
		{"TLS %s handshake error: %v%s", []any{"route", "EOF", " (CN=x)"}, "handshakeFailed"},
		{"TLS handshake error: %v%s", []any{"EOF", " (CN=x)"}, "handshakeFailed"},
		{"Readloop processing time: %v", []any{2 * time.Second}, "loadSignals"},
		{"Slow Consumer Detected: MaxPending of %d Exceeded", []any{64 << 20}, "loadSignals"},
		// %s is scState, "Detected" the first time (pinned below).
		{"Slow Consumer %s: WriteDeadline of %v exceeded with %d chunks of %d total bytes.", []any{"Detected", 10 * time.Second, 3, 4096}, "loadSignals"},
	}
	src := natsServerSource(t, "client.go")
	for _, lit := range []string{clientFormat, `scState := "Detected"`} {
		if !strings.Contains(src, lit) {
			t.Errorf("nats-server's client.go no longer holds %s: check handshakeFailed and loadSignals", lit)
		}
	}
	signals := map[string]bool{}
	for _, l := range lines {
		if !strings.Contains(src, strconv.Quote(l.format)) {
			t.Errorf("nats-server's client.go no longer logs %q: update %s", l.format, l.by)
		}
		msg := fmt.Sprintf(conn+" - "+l.format, l.args...)
		switch l.by {
		case "handshakeFailed":
			if !strings.Contains(msg, handshakeFailed) {
				t.Errorf("%q does not hold handshakeFailed (%q)", msg, handshakeFailed)
			}
		case "loadSignals":
			var found bool
			for _, sig := range loadSignals {
				if strings.Contains(msg, sig) {
					signals[sig], found = true, true
				}
			}
			if !found {
				t.Errorf("%q holds none of loadSignals %q", msg, loadSignals)
			}
		default:
			t.Fatalf("no check for %q", l.by)
		}
	}
	for _, sig := range loadSignals {
		if !signals[sig] {
			t.Errorf("load signal %q is in no line of nats-server this test knows: add the line it matches", sig)
		}
	}
}

// TestARouteThePeerClosedIsAWarning (a walkthrough): a route's write that failed
// because the other control node closed it first (a join closes one of two routes
// between the same nodes; a removal, a restart) was an ERROR at every join. A
// broken pipe or a reset is a warning; another write error stays an error.
func TestARouteThePeerClosedIsAWarning(t *testing.T) {
	var out bytes.Buffer
	l := newNATSLog(slog.New(slog.NewJSONHandler(&out, nil)), nil)
	hungUp := &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}
	reset := &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.ECONNRESET)}
	other := &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EIO)}
	l.Errorf("127.0.0.1:40738 - rid:37 - Error flushing: %v", hungUp)
	l.Errorf("127.0.0.1:40739 - rid:38 - Error flushing: %v", reset)
	l.Errorf("127.0.0.1:40740 - rid:39 - Error flushing: %v", other)
	var levels []string
	for _, r := range jsonRecords(t, &out) {
		levels = append(levels, fmt.Sprint(r["level"]))
	}
	if want := []string{"WARN", "WARN", "ERROR"}; !slices.Equal(levels, want) {
		t.Fatalf("levels %v, want %v:\n%s", levels, want, out.String())
	}
}
