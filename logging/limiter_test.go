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

// TestLimiterBounded: past the bound on kinds, lines are logged rather than dropped,
// and kinds with nothing pending are forgotten once their interval has passed.
func TestLimiterBounded(t *testing.T) {
	c := newClock()
	l := NewLimiter(10*time.Second, c.now)
	for i := range maxKinds {
		l.Allow("c", fmt.Sprint(i))
	}
	if ok, _ := l.Allow("c", "one more"); !ok {
		t.Fatal("a new kind past the bound was dropped")
	}
	if ok, _ := l.Allow("c", "one more"); !ok {
		t.Fatal("an untracked kind was limited")
	}
	c.advance(10 * time.Second)
	if ok, _ := l.Allow("c", "one more"); !ok {
		t.Fatal("a new kind was dropped")
	}
	if ok, _ := l.Allow("c", "one more"); ok {
		t.Fatal("after the expired kinds were forgotten, the new kind is not tracked")
	}
	if len(l.kinds) != 1 {
		t.Fatalf("%d kinds tracked, want the one new kind", len(l.kinds))
	}
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
