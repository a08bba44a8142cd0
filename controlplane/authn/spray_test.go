package authn

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkFailureSpray is a spray of failed enrolment attempts, each from an address
// of its own, as an attacker holding many addresses (an IPv6 prefix) makes them: the
// limiter already holds kept addresses, all failed within the window. The baseline is
// the map write alone.
func BenchmarkFailureSpray(b *testing.B) {
	for _, kept := range []int{1000, 150_000} {
		b.Run(fmt.Sprintf("limiter/%d-kept", kept), func(b *testing.B) {
			l := &limiter{limit: 5, window: time.Minute, m: map[string]*bucket{}}
			now := time.Now()
			for i := range kept {
				l.fail(fmt.Sprintf("2001:db8::%x", i), now)
			}
			b.ResetTimer()
			for i := range b.N {
				l.fail(fmt.Sprintf("2001:db8:1::%x", i), now)
			}
		})
		b.Run(fmt.Sprintf("baseline-map/%d-kept", kept), func(b *testing.B) {
			m := map[string]*bucket{}
			now := time.Now()
			for i := range kept {
				m[fmt.Sprintf("2001:db8::%x", i)] = &bucket{start: now}
			}
			b.ResetTimer()
			for i := range b.N {
				m[fmt.Sprintf("2001:db8:1::%x", i)] = &bucket{start: now}
			}
		})
	}
}

// A spray of fresh keys, every one still inside its window, costs the sweeps a
// bounded number of visits per key, not a visit of the whole table per key.
func TestSweepsStayLinearUnderASpray(t *testing.T) {
	const floor, keys = 1000, 50_000
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	l := &limiter{limit: 5, window: time.Minute, m: map[string]*bucket{}, sweep: sweeper{floor: floor}}
	w := &window{limit: 3, span: 30 * time.Second, m: map[string][]admitted{}, sweep: sweeper{floor: floor}}
	for i := range keys {
		l.fail(fmt.Sprintf("2001:db8::%x", i), now)
		if !w.admit(fmt.Sprintf("token-%d", i), "", now) {
			t.Fatalf("a token's first connection was refused")
		}
	}
	if len(l.m) != keys || len(w.m) != keys {
		t.Fatalf("the tables hold %d and %d keys; every one of the %d is young and must be kept", len(l.m), len(w.m), keys)
	}
	for name, v := range map[string]uint64{"failure limiter": l.sweep.visited, "token window": w.sweep.visited} {
		if v > 3*keys {
			t.Errorf("%s: sweeps visited %d entries for %d keys; want at most %d", name, v, keys, 3*keys)
		}
	}
}

// A sweep forgets what has expired and keeps what has not: an address still blocked
// stays blocked although its first failure is older than the window.
func TestSweepForgetsOnlyWhatExpired(t *testing.T) {
	const floor = 100
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	l := &limiter{limit: 2, window: time.Minute, m: map[string]*bucket{}, sweep: sweeper{floor: floor}}
	// blocked fails twice: blocked until 50 s + 1 min.
	l.fail("blocked", t0)
	if !l.fail("blocked", t0.Add(50*time.Second)) {
		t.Fatal("the second failure did not block the address")
	}
	for i := range floor {
		l.fail(fmt.Sprintf("old-%d", i), t0)
	}
	// 70 s on, the old addresses have expired; the block has not.
	later := t0.Add(70 * time.Second)
	l.fail("new", later)
	if _, ok := l.m["old-0"]; ok || len(l.m) != 2 {
		t.Fatalf("after the sweep the limiter holds %d addresses, want 2 (blocked, new)", len(l.m))
	}
	if !l.blocked("blocked", later) {
		t.Fatal("the sweep lifted a block before its end")
	}
	if l.blocked("blocked", t0.Add(111*time.Second)) {
		t.Fatal("the block outlived its minute")
	}

	w := &window{limit: 1, span: 30 * time.Second, m: map[string][]admitted{}, sweep: sweeper{floor: floor}}
	w.admit("busy", "", t0.Add(20*time.Second))
	for i := range floor {
		w.admit(fmt.Sprintf("old-%d", i), "", t0)
	}
	w.admit("new", "", t0.Add(40*time.Second))
	if len(w.m) != 2 {
		t.Fatalf("after the sweep the window holds %d tokens, want 2 (busy, new)", len(w.m))
	}
	if w.admit("busy", "", t0.Add(45*time.Second)) {
		t.Fatal("the sweep forgot a token's connection still inside its span")
	}
}
