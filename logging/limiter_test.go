package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock                   { return &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

// TestLimiterCountsRepeats: the first line of a kind passes; its repeats within the
// interval are held back and counted; the first line after the interval passes and
// carries the count, which then starts again from zero.
func TestLimiterCountsRepeats(t *testing.T) {
	c := newClock()
	l := NewLimiter(10*time.Second, c.now)
	type step struct {
		after      time.Duration
		ok         bool
		suppressed int
	}
	for i, s := range []step{
		{0, true, 0},
		{time.Second, false, 0},
		{time.Second, false, 0},
		{7 * time.Second, false, 0}, // 9 s after the first
		{time.Second, true, 3},      // 10 s: the interval has passed
		{time.Second, false, 0},
		{10 * time.Second, true, 1},
		{30 * time.Second, true, 0},
	} {
		c.advance(s.after)
		ok, n := l.Allow("raft", "failed to heartbeat to")
		if ok != s.ok || n != s.suppressed {
			t.Errorf("line %d: Allow = %v, %d; want %v, %d", i, ok, n, s.ok, s.suppressed)
		}
	}
}

// TestLimiterKinds: the component and the template make the kind; one kind's repeats
// hold back no other.
func TestLimiterKinds(t *testing.T) {
	c := newClock()
	l := NewLimiter(10*time.Second, c.now)
	for _, k := range [][2]string{{"raft", "failed to heartbeat to"}, {"raft", "failed to appendEntries to"}, {"broker", "failed to heartbeat to"}} {
		if ok, _ := l.Allow(k[0], k[1]); !ok {
			t.Errorf("the first %v line was held back", k)
		}
	}
	if ok, _ := l.Allow("raft", "failed to heartbeat to"); ok {
		t.Error("a repeat within the interval passed")
	}
}

// TestLimiterBounded: 100,000 kinds in one interval, as if each line's subject made
// its kind. The limiter tracks at most maxKinds of them, and the lines of the others
// share one allowance: one line, marked limiter_full, rather than one line each. After
// the interval the next of them reports how many were held back; then the kinds with
// nothing pending are forgotten, and a new kind has a window of its own again.
func TestLimiterBounded(t *testing.T) {
	c := newClock()
	l := NewLimiter(10*time.Second, c.now)
	var out bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&out, nil))
	ctx := context.Background()
	violation := func(subject string) {
		msg := fmt.Sprintf("Publish Violation - Subject %q", subject)
		l.Log(ctx, log, slog.LevelError, "broker", msg, msg)
	}
	const kinds = 100_000
	for i := range kinds {
		violation(fmt.Sprintf("x.%d", i))
	}
	if len(l.kinds) > maxKinds {
		t.Fatalf("%d kinds tracked, want at most %d", len(l.kinds), maxKinds)
	}
	recs := records(t, &out)
	if len(recs) != maxKinds+1 {
		t.Fatalf("%d kinds in one interval gave %d lines, want the %d tracked and one past the bound", kinds, len(recs), maxKinds)
	}
	if last := recs[len(recs)-1]; last[FullKey] != true || last[SuppressedKey] != nil {
		t.Fatalf("the line past the bound is %v, want %s and no count yet", last, FullKey)
	}

	c.advance(10 * time.Second)
	out.Reset()
	violation("x.after")
	violation("x.again")
	violation("x.again")
	recs = records(t, &out)
	if len(recs) != 2 {
		t.Fatalf("after the interval: %d lines, want 2:\n%s", len(recs), out.String())
	}
	if want := float64(kinds - maxKinds - 1); recs[0][FullKey] != true || recs[0][SuppressedKey] != want {
		t.Errorf("the first line after the interval is %v, want %s and %s=%v", recs[0], FullKey, SuppressedKey, want)
	}
	if recs[1][FullKey] != nil || recs[1][SuppressedKey] != nil {
		t.Errorf("the next new kind is %v, want a window of its own", recs[1])
	}
	if len(l.kinds) != 1 {
		t.Fatalf("%d kinds tracked, want the one new kind", len(l.kinds))
	}
}

// TestLimiterLogFirst: LogFirst lets the first n lines of an interval through, holds
// back the others, and the first line after the interval carries their count; Log,
// on the same limiter, lets one through.
func TestLimiterLogFirst(t *testing.T) {
	c := newClock()
	l := NewLimiter(10*time.Second, c.now)
	var out bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&out, nil))
	ctx := context.Background()
	for i := range 30 {
		l.LogFirst(ctx, log, slog.LevelError, 3, "broker", "Publish Violation - Subject", "Publish Violation - Subject", slog.Int("i", i))
		l.Log(ctx, log, slog.LevelError, "broker", "once", "once", slog.Int("i", i))
		c.advance(time.Second)
	}
	var first, once []map[string]any
	for _, r := range records(t, &out) {
		if r["msg"] == "once" {
			once = append(once, r)
		} else {
			first = append(first, r)
		}
	}
	if len(once) != 3 {
		t.Errorf("Log let %d lines through in 30 s, want 3", len(once))
	}
	if len(first) != 9 {
		t.Fatalf("LogFirst(3) let %d lines through in 30 s, want 9:\n%s", len(first), out.String())
	}
	for j, r := range first {
		interval, nth := j/3, j%3
		var want any
		if interval > 0 && nth == 0 {
			want = float64(7)
		}
		if r["i"] != float64(10*interval+nth) || r[SuppressedKey] != want {
			t.Errorf("line %d: %v, want i=%d and %s=%v", j, r, 10*interval+nth, SuppressedKey, want)
		}
	}
}

func records(t *testing.T, out *bytes.Buffer) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for line := range strings.Lines(out.String()) {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		recs = append(recs, r)
	}
	return recs
}

func TestNilLimiterAllows(t *testing.T) {
	var l *Limiter
	if ok, n := l.Allow("raft", "x"); !ok || n != 0 {
		t.Fatalf("nil limiter: %v, %d", ok, n)
	}
}

// TestLimiterLog: Log writes the lines Allow lets through, the count on the first one
// after the interval, and nothing for the others.
func TestLimiterLog(t *testing.T) {
	c := newClock()
	l := NewLimiter(10*time.Second, c.now)
	var out bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&out, nil))
	for i := range 30 {
		l.Log(context.Background(), log, slog.LevelError, "raft", "failed to heartbeat to", "failed to heartbeat to", slog.Int("attempt", i))
		c.advance(time.Second)
	}
	var recs []map[string]any
	for line := range strings.Lines(out.String()) {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		recs = append(recs, r)
	}
	if len(recs) != 3 {
		t.Fatalf("%d lines in 30 s, want 3:\n%s", len(recs), out.String())
	}
	for i, want := range []any{nil, float64(9), float64(9)} {
		if recs[i][SuppressedKey] != want || recs[i]["attempt"] != float64(10*i) || recs[i]["level"] != "ERROR" {
			t.Errorf("line %d: %v, want attempt %d, %s %v", i, recs[i], 10*i, SuppressedKey, want)
		}
	}
}
