package broker_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"mesh/broker"
	"mesh/logging"
)

// perKindPerInterval is the most lines one kind of client event may give in one
// interval: a handful, however many events there are.
const perKindPerInterval = 5

// startJSON starts a broker whose log is JSON at info, the level a control node runs at.
func startJSON(t *testing.T, m *mesh, auth broker.Authenticator) (*broker.Server, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	s, _ := startWith(t, m, auth, func(c *broker.Config) {
		c.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	})
	return s, logs
}

// records returns the log's lines at warning and above from byte from on, each decoded.
func records(t *testing.T, logs *syncBuffer, from int) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(logs.String()[from:]) {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("a log line is not one JSON object: %q: %v", line, err)
		}
		if r["level"] == "WARN" || r["level"] == "ERROR" {
			out = append(out, r)
		}
	}
	return out
}

// withMsg returns the records whose message contains text.
func withMsg(recs []map[string]any, text string) []map[string]any {
	var out []map[string]any
	for _, r := range recs {
		if msg, _ := r["msg"].(string); strings.Contains(msg, text) {
			out = append(out, r)
		}
	}
	return out
}

// hostAuth grants the holder of key what an enrolled host gets: its own status
// subject to publish, its own declarations to read, in the hosts account.
func hostAuth(key string) *fakeAuth {
	return &fakeAuth{decide: func(c broker.Client) (broker.Grant, error) {
		if c.Nkey != key {
			return broker.Grant{}, broker.ErrRefused
		}
		return broker.Grant{User: "node.a", Account: broker.AccountHosts,
			Publish: []string{"mesh.node.a.status"}, Subscribe: []string{"mesh.node.a.decl", "_INBOX.node.a.>"}}, nil
	}}
}

// forbidden returns the i-th of a series of distinct subjects the host may not publish
// on: x.aaa, x.aab, ...
func forbidden(i int) string {
	b := []byte("x.aaaa")
	for j := len(b) - 1; i > 0 && j >= 2; j-- {
		b[j] = byte('a' + i%26)
		i /= 26
	}
	return string(b)
}

// TestPublishViolationFlood: an enrolled host publishes to 5,000 distinct subjects it
// may not publish on. The broker refuses every one, and its log has a handful of
// lines for them, the first with its subject, however long, cut short; a violation of
// another kind (a subscription) is still logged; after the interval the next line
// says how many were held back.
func TestPublishViolationFlood(t *testing.T) {
	t.Parallel() // waits out the log's interval
	m := newMesh(t)
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	s, logs := startJSON(t, m, hostAuth(pub))
	host := mustDial(t, s, m.ca.Pin(), nats.Nkey(pub, kp.Sign), nats.CustomInboxPrefix("_INBOX.node.a"))
	start, from := time.Now(), len(logs.String())

	long := "x." + strings.Repeat("y", 2000)
	host.nc.Publish(long, []byte("forged"))
	const flood = 5000
	for i := range flood {
		host.nc.Publish(forbidden(i), []byte("forged"))
	}
	// The broker logs a violation as it reads the publication: once the PONG to this
	// flush is back, every line of the flood has been given to the log.
	if err := host.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	recs := records(t, logs, from)
	pubs := withMsg(recs, "Publish Violation")
	if len(pubs) == 0 || len(pubs) > perKindPerInterval {
		t.Fatalf("%d publish violations gave %d lines, want 1 to %d; %d bytes of log:\n%.3000s", flood+1, len(pubs), perKindPerInterval, len(logs.String()), logs.String())
	}
	if len(recs) > len(pubs) {
		t.Errorf("%d other warnings and errors during the flood:\n%.3000s", len(recs)-len(pubs), logs.String())
	}
	first := pubs[0]
	if subj, _ := first["subject"].(string); !strings.HasPrefix(subj, "x.yyyy") || len(subj) > 128+len("…") {
		t.Errorf("the first violation's subject attribute is %q (%d bytes), want the long subject cut to 128 bytes", subj, len(subj))
	}
	if msg, _ := first["msg"].(string); strings.Contains(msg, "yyyy") {
		t.Errorf("the subject is in the message %q, which must not vary with it", msg)
	}

	// Another kind of violation in the same interval is logged.
	if _, err := host.nc.SubscribeSync("mesh.node.b.decl"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return len(withMsg(records(t, logs, from), "Subscription Violation")) == 1 })

	// After the interval the next violation is logged with the count of the others.
	time.Sleep(time.Until(start.Add(logging.RepeatInterval + 100*time.Millisecond)))
	host.nc.Publish("x.after", []byte("forged"))
	if err := host.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	pubs = withMsg(records(t, logs, from), "Publish Violation")
	last := pubs[len(pubs)-1]
	want := float64(flood + 1 - (len(pubs) - 1))
	if last["subject"] != "x.after" || last[logging.SuppressedKey] != want {
		t.Fatalf("the line after the interval is %v, want subject x.after and %s=%v", last, logging.SuppressedKey, want)
	}
}

// Refusals as an Authenticator gives them: a Refusal with a fixed code,
// with detail wrapped around it.
var (
	errUnknownKey = broker.NewRefusal("unknown_key", "unknown node key")
	errRevoked    = broker.NewRefusal("revoked", "node revoked")
)

// TestRefusedConnectionFlood: anyone who reaches the port opens 200 connections with
// credentials the mesh refuses, each under another name. The log has a handful of
// lines for them, from the authentication hook and from nats-server alike; a refusal
// for another reason is still logged; after the interval the next refusal says how
// many were held back.
func TestRefusedConnectionFlood(t *testing.T) {
	t.Parallel() // waits out the log's interval
	m := newMesh(t)
	auth := &fakeAuth{decide: func(c broker.Client) (broker.Grant, error) {
		if c.Username == "revoked" {
			return broker.Grant{}, errRevoked
		}
		return broker.Grant{}, fmt.Errorf("%w (presented %q)", errUnknownKey, c.Username)
	}}
	s, logs := startJSON(t, m, auth)
	start, from := time.Now(), len(logs.String())
	const flood = 200
	for i := range flood {
		if _, err := dial(t, s, m.ca.Pin(), nats.UserInfo(fmt.Sprintf("guess-%d-%s", i, strings.Repeat("z", i)), "wrong")); err == nil {
			t.Fatal("a refused client connected")
		}
	}
	if n := len(auth.calls()); n != flood {
		t.Fatalf("%d authentications, want %d", n, flood)
	}
	recs := records(t, logs, from)
	refused := withMsg(recs, "client refused")
	natsLines := withMsg(recs, "authentication error")
	if len(refused) == 0 || len(refused) > perKindPerInterval || len(natsLines) > perKindPerInterval {
		t.Fatalf("%d refused connections gave %d \"client refused\" and %d \"authentication error\" lines, want 1 to %d each; %d bytes of log:\n%.3000s",
			flood, len(refused), len(natsLines), perKindPerInterval, len(logs.String()), logs.String())
	}
	if len(recs) > len(refused)+len(natsLines) {
		t.Errorf("%d other warnings and errors during the flood:\n%.3000s", len(recs)-len(refused)-len(natsLines), logs.String())
	}
	for _, r := range refused {
		if u, _ := r["user"].(string); len(u) > 128+len("…") {
			t.Errorf("a refusal logs the user the client chose whole: %d bytes", len(u))
		}
	}

	// A refusal for another reason is logged in the same interval.
	if _, err := dial(t, s, m.ca.Pin(), nats.UserInfo("revoked", "x")); err == nil {
		t.Fatal("a refused client connected")
	}
	revoked := withMsg(records(t, logs, from), "client refused")
	if r := revoked[len(revoked)-1]; !strings.Contains(fmt.Sprint(r["reason"]), "node revoked") {
		t.Fatalf("the refusal for another reason was not logged; the last is %v", r)
	}

	// After the interval the next refusal is logged with the count of the others.
	time.Sleep(time.Until(start.Add(logging.RepeatInterval + 100*time.Millisecond)))
	if _, err := dial(t, s, m.ca.Pin(), nats.UserInfo("late", "wrong")); err == nil {
		t.Fatal("a refused client connected")
	}
	waitFor(t, func() bool {
		refused := withMsg(records(t, logs, from), "client refused")
		last := refused[len(refused)-1]
		return last["user"] == "late"
	})
	refused = withMsg(records(t, logs, from), "client refused")
	last := refused[len(refused)-1]
	want := float64(flood - (len(refused) - 2)) // less the ones logged and the revoked one
	if last[logging.SuppressedKey] != want {
		t.Fatalf("the refusal after the interval is %v, want %s=%v", last, logging.SuppressedKey, want)
	}
	// nats-server's own line for each of them: one kind, and no user (a refused
	// client's user name is cleared before nats-server logs it: ours says it when
	// it has the form of one, see userText).
	natsLines = withMsg(records(t, logs, from), "authentication error")
	last = natsLines[len(natsLines)-1]
	want = float64(flood + 1 - (len(natsLines) - 1)) // the guesses and the revoked one, less the ones logged
	if strings.Contains(fmt.Sprint(last), "late") || last[logging.SuppressedKey] != want {
		t.Fatalf("nats-server's line after the interval is %v, want no user and %s=%v", last, logging.SuppressedKey, want)
	}
}
