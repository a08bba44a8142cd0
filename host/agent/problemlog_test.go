package agent

import (
	"fmt"
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
