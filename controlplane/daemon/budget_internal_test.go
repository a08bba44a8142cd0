package daemon

import (
	"log/slog"
	"testing"
	"time"
)

// TestASyncAnswerIsPaidForBySize: what a sync's answer sends costs the node a
// message of its budget for each SyncAnswerBytes, all or nothing, never more than a
// full budget less the request; the budget refills as for messages.
func TestASyncAnswerIsPaidForBySize(t *testing.T) {
	clock := time.Now()
	g := newGuard(slog.New(slog.DiscardHandler), func() time.Time { return clock }, Budgets{})
	unit := g.budgets.SyncAnswerBytes
	for size, want := range map[int]float64{0: 0, 300: 0, unit - 1: 0, unit: 1, 16 * unit: 16, 4 << 20: 64, 1 << 30: g.budgets.Burst - 1} {
		if got := g.answerCost(size); got != want {
			t.Errorf("an answer of %d bytes costs %v messages, want %v", size, got, want)
		}
	}
	// A 1 MiB declaration on 4 connections (64 messages) plus its request: three
	// answers of a full budget of 200, then none until it refills; the requests
	// refused an answer cost one message each.
	answered := 0
	for range 5 {
		if g.spend("n-0") && g.spendN("n-0", g.answerCost(4<<20)) {
			answered++
		}
	}
	if answered != 3 {
		t.Errorf("%d answers of 4 MiB from a full budget, want 3", answered)
	}
	if g.spendN("n-0", 64) {
		t.Error("an answer was paid for from a spent budget")
	}
	if !g.spend("n-0") {
		t.Error("a refused answer took the messages it could not pay for: the request after it has none")
	}
	clock = clock.Add(4 * time.Second) // 80 messages refilled
	if !g.spendN("n-0", 64) {
		t.Error("the refilled budget does not pay for an answer")
	}
}
