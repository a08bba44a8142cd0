package broker

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"mesh/logging"
)

// Connections as nats-server names them in its lines (client.go: "%s - cid:%d", then
// the client's name and the account/user, each %q).
const (
	hostConn     = `127.0.0.1:40000 - cid:9 - "v1.55.0:go:meshhost web-1" - "ACALR4RLSRBUCVLN/HOSTS/nkey:UAMY2WWY6M5AS6X2"`
	operatorConn = `10.0.0.9:51000 - cid:12 - "v1.55.0:go:NATS CLI Version 0.2.2" - "ACOPS/OPERATORS/jwt:UOPERATOR"`
	bareConn     = `127.0.0.1:40002 - cid:11`
)

// TestClientEvents: each of nats-server's lines about what one client did is read as
// what happened, who the client is and what it chose, whatever the client chose.
func TestClientEvents(t *testing.T) {
	hostile := `x" - "AEVIL/CONTROL/token" - Publish Violation - Subject %s %d - Subscription Violation - Subject "q", SID 1`
	hostileConn := fmt.Sprintf(`127.0.0.1:40003 - cid:13 - %q - "ACALR4RLSRBUCVLN/HOSTS/nkey:UEVIL"`, hostile)
	for _, tt := range []struct {
		name    string
		format  string
		v       []any
		what    string
		conn    connection
		detail  map[string]string
		account string // of the kind
		user    string // of the kind
	}{
		{"a host's publication", hostConn + ` - Publish Violation - Subject %q`, []any{[]byte("mesh.node.b.decl")},
			"Publish Violation - Subject", connection{"127.0.0.1:40000 - cid:9", "v1.55.0:go:meshhost web-1", "HOSTS", "nkey:UAMY2WWY6M5AS6X2"},
			map[string]string{"subject": "mesh.node.b.decl"}, "HOSTS", "nkey"},
		{"an operator's publication (message tracing passes a string)", operatorConn + ` - Publish Violation - Subject %q`, []any{"$SYS.REQ.SERVER.cp-1.KICK"},
			"Publish Violation - Subject", connection{"10.0.0.9:51000 - cid:12", "v1.55.0:go:NATS CLI Version 0.2.2", "OPERATORS", "jwt:UOPERATOR"},
			map[string]string{"subject": "$SYS.REQ.SERVER.cp-1.KICK"}, "OPERATORS", "jwt"},
		{"a reply", hostConn + ` - Publish Violation - Reply %q`, []any{[]byte("_INBOX.x")},
			"Publish Violation - Reply", connection{"127.0.0.1:40000 - cid:9", "v1.55.0:go:meshhost web-1", "HOSTS", "nkey:UAMY2WWY6M5AS6X2"},
			map[string]string{"reply": "_INBOX.x"}, "HOSTS", "nkey"},
		{"a subscription", hostConn + ` - Subscription Violation - Subject ">", SID 7`, nil,
			"Subscription Violation - Subject", connection{"127.0.0.1:40000 - cid:9", "v1.55.0:go:meshhost web-1", "HOSTS", "nkey:UAMY2WWY6M5AS6X2"},
			map[string]string{"subject": ">"}, "HOSTS", "nkey"},
		{"a queue subscription", hostConn + ` - Subscription Violation - Subject "a.%s", Queue: "q\"1", SID 8`, nil,
			"Subscription Violation - Subject", connection{"127.0.0.1:40000 - cid:9", "v1.55.0:go:meshhost web-1", "HOSTS", "nkey:UAMY2WWY6M5AS6X2"},
			map[string]string{"subject": "a.%s", "queue": `q"1`}, "HOSTS", "nkey"},
		{"too many tokens", hostConn + ` - Subscription Violation Too Many Tokens - Subject "a.b.c", SID 9`, nil,
			"Subscription Violation Too Many Tokens - Subject", connection{"127.0.0.1:40000 - cid:9", "v1.55.0:go:meshhost web-1", "HOSTS", "nkey:UAMY2WWY6M5AS6X2"},
			map[string]string{"subject": "a.b.c"}, "HOSTS", "nkey"},
		{"a refused CONNECT", bareConn + ` - %v - %s`, []any{server.ErrAuthentication, `User "guess-1"`},
			"authentication error", connection{addr: "127.0.0.1:40002 - cid:11"},
			map[string]string{"user": `User "guess-1"`}, "", ""},
		{"a refused CONNECT without credentials", bareConn + ` - authentication error`, nil,
			"authentication error", connection{addr: "127.0.0.1:40002 - cid:11"}, map[string]string{}, "", ""},
		{"an error the client sent", hostConn + ` - Client Error %s`, []any{"'anything at all'"},
			"Client Error", connection{"127.0.0.1:40000 - cid:9", "v1.55.0:go:meshhost web-1", "HOSTS", "nkey:UAMY2WWY6M5AS6X2"},
			map[string]string{"error": "'anything at all'"}, "HOSTS", "nkey"},
		{"a client whose name mimics a line", hostileConn + ` - Publish Violation - Subject %q`, []any{"y"},
			"Publish Violation - Subject", connection{"127.0.0.1:40003 - cid:13", hostile, "HOSTS", "nkey:UEVIL"},
			map[string]string{"subject": "y"}, "HOSTS", "nkey"},
		{"a client whose name mimics a subscription violation", hostileConn + ` - Subscription Violation - Subject "z", SID 1`, nil,
			"Subscription Violation - Subject", connection{"127.0.0.1:40003 - cid:13", hostile, "HOSTS", "nkey:UEVIL"},
			map[string]string{"subject": "z"}, "HOSTS", "nkey"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e, ok := clientEventOf(tt.format, tt.v)
			if !ok {
				t.Fatalf("%q is not read as a client event", tt.format)
			}
			if e.what != tt.what || e.conn != tt.conn {
				t.Errorf("read as %q by %+v, want %q by %+v", e.what, e.conn, tt.what, tt.conn)
			}
			detail := map[string]string{}
			for _, a := range e.detail {
				detail[a.Key] = a.Value.String()
			}
			if fmt.Sprint(detail) != fmt.Sprint(tt.detail) {
				t.Errorf("detail %v, want %v", detail, tt.detail)
			}
			if want := tt.what + " in " + tt.account + " by " + tt.user; e.kind() != want {
				t.Errorf("kind %q, want %q", e.kind(), want)
			}
		})
	}
	for _, format := range []string{
		"Error trying to connect to route (attempt %v): %v",
		hostConn + " - Readloop processing time: %v",
		bareConn + " - TLS handshake error: %v",
		hostConn + ` - Subscription Violation - Subject "unterminated`,
		"%s - %s",
	} {
		if e, ok := clientEventOf(format, []any{1, 2}[:strings.Count(format, "%")]); ok {
			t.Errorf("%q is read as client event %+v", format, e)
		}
	}
}

// TestClientEventText: what a client chose is cut to maxClientText bytes, on a
// character boundary, in the line's attributes; the message is nats-server's words.
func TestClientEventText(t *testing.T) {
	subject := "x." + strings.Repeat("é", 2000)
	name := strings.Repeat("n", 5000)
	conn := fmt.Sprintf(`127.0.0.1:1 - cid:1 - %q - "A/HOSTS/nkey:U"`, name)
	e, ok := clientEventOf(conn+" - Publish Violation - Subject %q", []any{subject})
	if !ok {
		t.Fatal("not read as a client event")
	}
	attrs := map[string]string{}
	for _, a := range e.attrs() {
		attrs[a.Key] = a.Value.String()
		if len(attrs[a.Key]) > maxClientText+len("…") {
			t.Errorf("attribute %s is %d bytes", a.Key, len(attrs[a.Key]))
		}
	}
	if s := attrs["subject"]; !strings.HasPrefix(s, "x.é") || !strings.HasSuffix(s, "é…") {
		t.Errorf("the subject is cut to %q, want its start, cut between characters", s)
	}
	if n := attrs["name"]; !strings.HasPrefix(n, "nnn") || !strings.HasSuffix(n, "…") {
		t.Errorf("the client's name is cut to %q", n)
	}
	if e.what != "Publish Violation - Subject" || attrs["account"] != "HOSTS" {
		t.Errorf("read as %q in %q", e.what, attrs["account"])
	}
}

// TestNATSLogClientEventFlood: 100,000 publish violations on distinct subjects, from
// clients of distinct names and connections, in one interval: a handful of lines,
// each with its subject; the kinds the limiter tracks stay few, so a line of a new
// kind (a route error) is still logged as its own kind, and so is another client
// event (a subscription violation); the next interval's first line carries the count.
func TestNATSLogClientEventFlood(t *testing.T) {
	var out bytes.Buffer
	c := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	l := newNATSLog(slog.New(slog.NewJSONHandler(&out, nil)), logging.NewLimiter(10*time.Second, c.now))
	const flood = 100_000
	for i := range flood {
		l.Errorf(fmt.Sprintf(`127.0.0.1:%d - cid:%d - "name-%d" - "A/HOSTS/nkey:U%d" - Publish Violation - Subject %%q`, 1024+i%60000, i, i, i), fmt.Appendf(nil, "x.%d.%s", i, strings.Repeat("y", i%3000)))
	}
	l.Errorf("Error trying to connect to route (attempt %v): %v", 1, "dial tcp 10.0.0.2:6222: connect: connection refused")
	l.Errorf(hostConn + ` - Subscription Violation - Subject ">", SID 1`)
	recs := jsonRecords(t, &out)
	if len(recs) != clientEventsPerInterval+2 {
		t.Fatalf("%d violations and two other lines gave %d lines, want %d and the two", flood, len(recs), clientEventsPerInterval)
	}
	for i, r := range recs[:clientEventsPerInterval] {
		if r["msg"] != "Publish Violation - Subject" || !strings.HasPrefix(r["subject"].(string), fmt.Sprintf("x.%d.", i)) || r["account"] != "HOSTS" {
			t.Errorf("line %d: %v", i, r)
		}
	}
	route, sub := recs[clientEventsPerInterval], recs[clientEventsPerInterval+1]
	if !strings.HasPrefix(route["msg"].(string), "Error trying to connect to route") || route[logging.FullKey] != nil {
		t.Errorf("the route error after the flood is %v, want it logged as a kind of its own", route)
	}
	if sub["msg"] != "Subscription Violation - Subject" || sub["subject"] != ">" {
		t.Errorf("the subscription violation after the flood is %v", sub)
	}
	c.t = c.t.Add(10 * time.Second)
	out.Reset()
	l.Errorf(hostConn+` - Publish Violation - Subject %q`, []byte("x.next"))
	recs = jsonRecords(t, &out)
	if len(recs) != 1 || recs[0][logging.SuppressedKey] != float64(flood-clientEventsPerInterval) {
		t.Fatalf("the next interval's first violation is %v, want %s=%d", recs, logging.SuppressedKey, flood-clientEventsPerInterval)
	}
}

// fakeClientAuth is what nats-server hands the hook for one CONNECT.
type fakeClientAuth struct {
	opts   server.ClientOpts
	remote net.Addr
}

func (c *fakeClientAuth) GetOpts() *server.ClientOpts                 { return &c.opts }
func (c *fakeClientAuth) GetTLSConnectionState() *tls.ConnectionState { return nil }
func (c *fakeClientAuth) RegisterUser(*server.User)                   {}
func (c *fakeClientAuth) RemoteAddress() net.Addr                     { return c.remote }
func (c *fakeClientAuth) GetNonce() []byte                            { return []byte("nonce") }
func (c *fakeClientAuth) Kind() int                                   { return server.CLIENT }
func (c *fakeClientAuth) GetID() uint64                               { return 1 }

type refuseAll func(Client) error

func (f refuseAll) Authenticate(c Client) (Grant, error) { return Grant{}, f(c) }

// TestHookRefusals: 200 refused CONNECTs from as many addresses under as many names,
// with detail around the reason: a handful of lines, the names cut short; a refusal
// for another reason is logged; the next interval's first refusal carries the count.
// A hook built without a limiter limits with one of its own.
func TestHookRefusals(t *testing.T) {
	unknown := NewRefusal("unknown_key", "unknown node key")
	revoked := NewRefusal("revoked", "node revoked")
	auth := refuseAll(func(c Client) error {
		if c.Username == "revoked" {
			return revoked
		}
		return fmt.Errorf("%w (presented %q)", unknown, c.Username)
	})
	var out bytes.Buffer
	c := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	h := &hook{auth: auth, log: slog.New(slog.NewJSONHandler(&out, nil)), refusals: logging.NewLimiter(10*time.Second, c.now)}
	connect := func(user string, port int) {
		if h.Check(&fakeClientAuth{opts: server.ClientOpts{Username: user, Password: "secret"}, remote: &net.TCPAddr{IP: net.IPv4(10, 0, byte(port>>8), byte(port)), Port: port}}) {
			t.Fatal("a refused client was let in")
		}
	}
	const flood = 200
	for i := range flood {
		connect(fmt.Sprintf("guess-%d-%s", i, strings.Repeat("z", 3*i)), i)
	}
	connect("revoked", 1)
	recs := jsonRecords(t, &out)
	if len(recs) != clientEventsPerInterval+1 {
		t.Fatalf("%d refusals for one reason and one for another gave %d lines, want %d and one", flood, len(recs), clientEventsPerInterval)
	}
	for _, r := range recs {
		if r["msg"] != "client refused" || r["level"] != "WARN" || len(r["user"].(string)) > maxClientText+len("…") || strings.Contains(fmt.Sprint(r), "secret") {
			t.Errorf("line %v", r)
		}
	}
	if r := recs[clientEventsPerInterval]; r["reason"] != revoked.Error() || r["code"] != revoked.Code {
		t.Errorf("the refusal for another reason is %v", r)
	}
	c.t = c.t.Add(10 * time.Second)
	out.Reset()
	connect("late", 1)
	recs = jsonRecords(t, &out)
	if len(recs) != 1 || recs[0]["user"] != "late" || recs[0][logging.SuppressedKey] != float64(flood-clientEventsPerInterval) {
		t.Fatalf("the next interval's first refusal is %v, want user late and %s=%d", recs, logging.SuppressedKey, flood-clientEventsPerInterval)
	}

	out.Reset()
	own := &hook{auth: auth, log: slog.New(slog.NewJSONHandler(&out, nil))}
	for i := range flood {
		if own.Check(&fakeClientAuth{opts: server.ClientOpts{Username: fmt.Sprint(i)}, remote: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: i}}) {
			t.Fatal("a refused client was let in")
		}
	}
	if n := len(jsonRecords(t, &out)); n != clientEventsPerInterval {
		t.Fatalf("a hook without a limiter logged %d lines for %d refusals, want %d", n, flood, clientEventsPerInterval)
	}
}

// TestRefusalCode: the kind of a refusal, and its metric's reason, is the code of
// the Refusal it wraps, whatever detail is wrapped around that; never its text.
func TestRefusalCode(t *testing.T) {
	reason := NewRefusal("bad_operator", "operator credentials not issued by this mesh")
	for err, want := range map[error]string{
		reason: "bad_operator",
		fmt.Errorf("%w: credentials expired", reason):                          "bad_operator",
		fmt.Errorf("wrapped: %w", fmt.Errorf("%w: %v", reason, "client text")): "bad_operator",
		ErrRefused:                               CodeRefused,
		fmt.Errorf("%w: a sentence", ErrRefused): CodeRefused,
		errors.Join(ErrRefused, reason):          "bad_operator",
		ErrFull:                                  "full",
		errors.New("the roster is not ready"):    CodeNotRefusal,
	} {
		if got := RefusalCode(err); got != want {
			t.Errorf("RefusalCode(%q) = %q, want %q", err, got, want)
		}
	}
	if !errors.Is(fmt.Errorf("%w: detail", reason), reason) || !errors.Is(reason, ErrRefused) {
		t.Error("a refusal with detail around it is not itself, or not ErrRefused, to errors.Is")
	}
	if reason.Error() != "connection refused: operator credentials not issued by this mesh" {
		t.Errorf("a refusal reads %q: its text is for people, as before", reason.Error())
	}
}

// TestARefusalsOwnReasonIsWhole: the broker's own refusal texts were cut at 128
// bytes like what a client chose, and lost their useful end ("up to 1m0s", "the
// host will try another control node": a walkthrough); they are logged whole, and
// an error that wraps other text is still cut.
func TestARefusalsOwnReasonIsWhole(t *testing.T) {
	long := NewRefusal("full", strings.Repeat("a reason of the broker's own, ", 8)+"and its useful end")
	attrs := map[string]string{}
	for _, a := range refusedAttrs(Client{}, long) {
		attrs[a.Key] = a.Value.String()
	}
	if !strings.HasSuffix(attrs["reason"], "and its useful end") {
		t.Errorf("the broker's own reason was cut: %q", attrs["reason"])
	}
	wrapped := fmt.Errorf("%w: %s", long, strings.Repeat("x", 500))
	for _, a := range refusedAttrs(Client{}, wrapped) {
		if a.Key == "reason" && len(a.Value.String()) > maxClientText+len("…") {
			t.Errorf("a wrapped reason, %d bytes, was not cut", len(a.Value.String()))
		}
	}
}

// TestALoginWhoseConnectionClosedIsNotJudged: a CONNECT whose connection nats-server
// has closed before the hook runs (a stopping broker closes every client at once)
// comes without its TLS state, and a bound nonce signature checked without it fails
// as a relay's does: a broker that stopped logged an honest host's login as
// bad_signature. Such a login is refused without asking the Authenticator, counted
// under no reason, and not logged above debug; a live connection (an in-process
// client has no TLS either) is judged as ever.
func TestALoginWhoseConnectionClosedIsNotJudged(t *testing.T) {
	asked := 0
	auth := refuseAll(func(Client) error { asked++; return NewRefusal("bad_signature", "nonce signature does not verify") })
	var out bytes.Buffer
	h := &hook{auth: auth, log: slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	if h.Check(&fakeClientAuth{opts: server.ClientOpts{Nkey: "UKEY", Sig: "sig"}}) {
		t.Fatal("a login over a closed connection was let in")
	}
	if asked != 0 || out.Len() != 0 || len(h.refused.snapshot()) != 0 {
		t.Fatalf("a login over a closed connection was judged: asked %d, logged %q, counted %v", asked, out.String(), h.refused.snapshot())
	}
	if h.Check(&fakeClientAuth{opts: server.ClientOpts{Nkey: "UKEY", Sig: "sig"}, remote: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 1}}) {
		t.Fatal("a refused client was let in")
	}
	if asked != 1 || !strings.Contains(out.String(), "bad_signature") || h.refused.snapshot()["bad_signature"] != 1 {
		t.Fatalf("a live connection was not judged: asked %d, logged %q, counted %v", asked, out.String(), h.refused.snapshot())
	}
}

// TestAClosedLoginLogsNoSecretGivenAsItsUser (a review): the refusal of a login
// whose connection closed before it was judged clipped the user name where every
// other refusal filters it (userText): a token's secret pasted as the user name
// reached the debug log whole.
func TestAClosedLoginLogsNoSecretGivenAsItsUser(t *testing.T) {
	secret := strings.Repeat("0123456789abcdef", 4)
	auth := refuseAll(func(Client) error { return NewRefusal("bad_signature", "x") })
	var out bytes.Buffer
	h := &hook{auth: auth, log: slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	if h.Check(&fakeClientAuth{opts: server.ClientOpts{Username: secret, Password: "x"}}) {
		t.Fatal("a login over a closed connection was let in")
	}
	if !strings.Contains(out.String(), "gone before its login was judged") || strings.Contains(out.String(), secret) {
		t.Fatalf("want the closed login logged without the secret given as its user: %s", out.String())
	}
}
