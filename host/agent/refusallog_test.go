package agent

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestRefusalFloodLogBounded: whoever can put bytes on the node's subject (a broker
// that is not the mesh's, a removed control node holding a certificate of the mesh)
// sends the agent 2,000 envelopes it refuses. Each is counted
// (mesh_agent_envelopes_refused_total), but the log gets a few lines of each code
// every 10 s, and the next line after that says how many were held back. Before,
// every envelope was a line: a flood of junk became a flood of the host's journal.
func TestRefusalFloodLogBounded(t *testing.T) {
	f := newFixture(t)
	var logged bytes.Buffer
	f.a.log = slog.New(slog.NewTextHandler(&logged, nil))
	now := t0
	f.a.o.Now = func() time.Time { return now }
	const flood = 2000
	for range flood {
		if err := f.a.handle(context.Background(), []byte("\x00\xffnot an envelope")); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.a.stats.refused["malformed"]; got != flood {
		t.Fatalf("%d refusals counted, want %d", got, flood)
	}
	lines := strings.Count(logged.String(), "envelope not applied")
	if lines < 1 || lines > refusalLinesPerInterval {
		t.Fatalf("%d junk envelopes gave %d log lines, want 1 to %d:\n%.2000s", flood, lines, refusalLinesPerInterval, logged.String())
	}
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	// Another code in the same interval is logged: the first of its kind says what it is.
	if err := f.a.handle(context.Background(), f.decl(t, 1, "x", other)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logged.String(), "code=untrusted") {
		t.Fatalf("a refusal of another code was not logged:\n%.2000s", logged.String())
	}
	now = now.Add(refusalLogInterval)
	f.a.handle(context.Background(), []byte("junk"))
	want := "suppressed=" + itoa(flood-lines)
	last := logged.String()[strings.LastIndex(logged.String(), "envelope not applied"):]
	if !strings.Contains(last, "code=malformed") || !strings.Contains(last, want) {
		t.Fatalf("the line after the interval is %q, want code=malformed and %s", last, want)
	}
}

// TestQueueFullLogBounded: a flood on the node's subject keeps the declaration queue
// full, and nats.go reports it each time the agent has taken one envelope and the
// next does not fit: about once per envelope. The log gets a few lines every 10 s,
// not one per report.
func TestQueueFullLogBounded(t *testing.T) {
	f := newFixture(t)
	var logged bytes.Buffer
	f.a.log = slog.New(slog.NewTextHandler(&logged, nil))
	sub := &nats.Subscription{Subject: f.a.id.Subjects.Declarations}
	const reports = 1000
	for range reports {
		f.a.asyncError(sub, nats.ErrSlowConsumer)
	}
	lines := strings.Count(logged.String(), "declaration queue full")
	if lines < 1 || lines > refusalLinesPerInterval {
		t.Fatalf("%d reports of a full queue gave %d log lines, want 1 to %d", reports, lines, refusalLinesPerInterval)
	}
}
