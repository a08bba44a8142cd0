package agent

import (
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

func TestHoming(t *testing.T) {
	const home, other = "tls://10.0.0.1:4222", "tls://10.0.0.2:4222"
	pool := []string{other, home}
	h := newHoming(time.Minute)
	for range 100 {
		if d := h.interval(); d < 30*time.Second || d > time.Minute {
			t.Fatalf("interval %s, want within [30s, 1m]", d)
		}
	}
	servers := []nats.Server{{URL: mustURL(t, other)}, {URL: mustURL(t, home)}}
	if s, _ := h.pick(servers, nats.ServerInfo{}); s != nil {
		t.Fatalf("a reconnection nobody asked home for went to %s, want nats.go's own choice", s.URL)
	}
	if h.look(home, home, pool) || h.wait != time.Minute {
		t.Fatalf("at home: move %t, wait %s", h.look(home, home, pool), h.wait)
	}
	if h.look(home, "", pool) {
		t.Fatal("a move asked while disconnected")
	}
	if h.look(home, other, []string{other}) {
		t.Fatal("a move asked to a broker outside the connection's pool")
	}
	// Away: move, once, to home; each move that does not end home doubles the wait.
	if !h.look(home, other, pool) || h.wait != 2*time.Minute {
		t.Fatalf("away: no move, or wait %s, want 2m", h.wait)
	}
	if s, d := h.pick(servers, nats.ServerInfo{}); s == nil || s.URL.String() != home || d != 0 {
		t.Fatalf("the asked reconnection went to %v (after %s), want %s at once", s, d, home)
	}
	if s, _ := h.pick(servers, nats.ServerInfo{}); s != nil {
		t.Fatalf("the attempt after it went to %s: home refused must leave nats.go its choice", s.URL)
	}
	for range 10 {
		h.look(home, other, pool)
	}
	if h.wait != maxHomeWait {
		t.Fatalf("wait %s after many moves, want %s", h.wait, maxHomeWait)
	}
	h.look(home, home, pool)
	if h.wait != time.Minute {
		t.Fatalf("back home, wait %s, want the start again", h.wait)
	}
	if off := newHoming(0); off.interval() != 0 {
		t.Fatal("0 must never look")
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestAMoveThatEndsHomeStartsTheWaitAgain (audit of the control plane's weeks,
// finding 6): the wait doubled at each move, ended home or not, and went back only
// when a later look found the agent home; displaced again before that look (its
// home restarted in a rolling restart), a host stayed away for up to the doubled
// wait. A connection made to home starts it again; one made elsewhere does not.
func TestAMoveThatEndsHomeStartsTheWaitAgain(t *testing.T) {
	const home, other = "tls://10.0.0.1:4222", "tls://10.0.0.2:4222"
	pool := []string{other, home}
	h := newHoming(time.Minute)
	for range 4 {
		h.look(home, other, pool)
	}
	if h.wait != 16*time.Minute {
		t.Fatalf("wait %s after four moves, want 16m", h.wait)
	}
	if h.arrived(home, other) || h.wait != 16*time.Minute {
		t.Fatalf("a connection elsewhere changed the wait to %s", h.wait)
	}
	if !h.arrived(home, home) || h.wait != time.Minute {
		t.Fatalf("arrived home: wait %s, want the start again", h.wait)
	}
	if h.arrived(home, home) {
		t.Fatal("arriving home again with the wait at its start asks the timer to be set again")
	}
	if h.arrived("", other) {
		t.Fatal("no home known: nothing to change")
	}
}
