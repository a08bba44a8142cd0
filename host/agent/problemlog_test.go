package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// A connection problem that repeats is logged once, then once a minute with how many
// were held back; another problem is logged at once; after a connection the next
// outage's first problem is logged at once.
func TestARepeatedConnectionProblemIsLoggedOnceAMinute(t *testing.T) {
	var p problemLog
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	refusedA := "dial tcp 10.0.0.1:7300: connect: connection refused"
	refusedB := "dial tcp 10.0.0.2:7300: connect: connection refused"
	step := func(at time.Duration, text string, wantOK bool, wantHeld int) {
		t.Helper()
		ok, held := p.allow(text, t0.Add(at))
		if ok != wantOK || held != wantHeld {
			t.Fatalf("at %s, %q: logged %v with %d held back, want %v with %d", at, text, ok, held, wantOK, wantHeld)
		}
	}
	step(0, refusedA, true, 0)
	step(time.Second, refusedB, true, 0) // another broker: news
	for i := range 10 {
		step(time.Duration(2+i*5)*time.Second, refusedA, false, 0)
		step(time.Duration(3+i*5)*time.Second, refusedB, false, 0)
	}
	step(time.Minute, refusedA, true, 10)
	step(time.Minute+time.Second, refusedA, false, 0)
	step(time.Minute+time.Second, refusedB, true, 10)

	p.reset() // connected
	step(time.Minute+2*time.Second, refusedA, true, 0)

	// Many distinct problems do not grow the memory past its bound.
	for i := range 10 * maxProblems {
		p.allow(fmt.Sprintf("problem %d", i), t0)
	}
	if len(p.seen) > maxProblems {
		t.Fatalf("%d problems remembered, at most %d", len(p.seen), maxProblems)
	}
}

// TestTheFirstConnectionLogsARepeatedProblemOnceAMinute: an agent started while no
// broker answers logs "cannot reach the mesh yet" at once, then the same problem at
// most once a minute, saying how many it held back, as a lost connection does.
// Before (an audit), it logged every attempt, one every 30 s for an outage's
// length. Each attempt here reads a clock 31 s on from the last one's.
func TestTheFirstConnectionLogsARepeatedProblemOnceAMinute(t *testing.T) {
	f := newFixture(t)
	var logged strings.Builder
	f.a.log = slog.New(slog.NewTextHandler(&logged, nil))
	calls := 0
	f.a.o.Now = func() time.Time { calls++; return t0.Add(time.Duration(calls) * 31 * time.Second) }
	// Attempts at 0, 1 s and 3 s of backoff (the next at 7 s): three, refused at once (nothing
	// listens on port 1).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := f.a.connect(ctx, "nats://127.0.0.1:1", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("connect: %v", err)
	}
	if calls != 3 {
		t.Fatalf("setup: %d attempts, want 3", calls)
	}
	lines := strings.Count(logged.String(), "cannot reach the mesh yet")
	if lines != 2 || strings.Count(logged.String(), "suppressed=1") != 1 {
		t.Fatalf("%d lines for 3 attempts over 62 s, want 2, the second saying 1 was held back:\n%s", lines, logged.String())
	}
}
