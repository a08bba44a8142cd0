package authn

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"mesh/broker"
)

// logins makes the logins of one key, each with a nonce of its own, as a broker
// presents them.
type logins struct {
	t  *testing.T
	kp nkeys.KeyPair
	n  int
}

func (l *logins) next() broker.Client {
	l.n++
	nonce := []byte(fmt.Sprintf("nonce-%s-%d", pub(l.kp), l.n))
	return broker.Client{Nkey: pub(l.kp), Nonce: nonce, Sig: sign(l.t, l.kp, nonce), Remote: remote1}
}

// TestANodeKeyLogsInAtABoundedRate: a live node key is admitted NodeLogins times
// a NodeLoginSpan on one broker, then refused (node_login_rate) until the oldest
// login is that old; a connection admitted before is never refused when nats-server
// asks again at a reload; another key, and a revoked key, have budgets of their own;
// and a login whose signature does not verify spends nothing of the key's. Before, a
// live key had no limit: a host disconnected for its budget logged in again 135 to
// 380 times a second.
func TestANodeKeyLogsInAtABoundedRate(t *testing.T) {
	fx := newFixture(t)
	a := fx.auth("")
	web1 := &logins{t: t, kp: fx.web1}
	// Logins with the key's public half and a bad signature: a stranger knows it.
	for range 3 * NodeLogins {
		c := web1.next()
		c.Sig = sign(t, fx.newDB, c.Nonce)
		if _, err := a.Authenticate(c); !errors.Is(err, ErrBadSignature) {
			t.Fatalf("a signature by another key: %v, want ErrBadSignature", err)
		}
	}
	var first broker.Client
	for i := range NodeLogins {
		c := web1.next()
		if i == 0 {
			first = c
		}
		if g, err := a.Authenticate(c); err != nil || g.Account != broker.AccountHosts {
			t.Fatalf("login %d of %d within the span: %+v, %v", i+1, NodeLogins, g, err)
		}
		fx.clock = fx.clock.Add(NodeLoginSpan / (2 * NodeLogins))
	}
	// Half the span on: one more is refused, the signature not even looked at.
	over := web1.next()
	over.Sig = "not a signature"
	if _, err := a.Authenticate(over); !errors.Is(err, ErrNodeLoginRate) {
		t.Fatalf("a login over the budget: %v, want ErrNodeLoginRate", err)
	}
	if got := broker.RefusalCode(ErrNodeLoginRate); got != "node_login_rate" {
		t.Errorf("the refusal's code is %q", got)
	}
	recheck := first
	recheck.Recheck = true
	if _, err := a.Authenticate(recheck); err != nil {
		t.Fatalf("a connection admitted before, checked again at a reload: %v", err)
	}
	other := &logins{t: t, kp: fx.newDB}
	if _, err := a.Authenticate(other.next()); err != nil {
		t.Fatalf("another node's key: %v", err)
	}
	gone := &logins{t: t, kp: fx.gone}
	for i := range RevokedConnections {
		if g, err := a.Authenticate(gone.next()); err != nil || g.Account != broker.AccountRevoked {
			t.Fatalf("a revoked key's login %d: %+v, %v", i+1, g, err)
		}
	}
	// The first login is a span old: one more is admitted, and the next refused.
	fx.clock = now0.Add(NodeLoginSpan)
	if _, err := a.Authenticate(web1.next()); err != nil {
		t.Fatalf("the first login a span old: %v", err)
	}
	if _, err := a.Authenticate(web1.next()); !errors.Is(err, ErrNodeLoginRate) {
		t.Fatalf("the second login a span after the first: %v, want ErrNodeLoginRate", err)
	}
	// A whole span after the last login, as many again.
	fx.clock = fx.clock.Add(NodeLoginSpan)
	for i := range NodeLogins {
		if _, err := a.Authenticate(web1.next()); err != nil {
			t.Fatalf("login %d a span later: %v", i+1, err)
		}
	}
}

// TestANodeKickedForItsBudgetCoolsDown: after the control plane disconnects a live
// key for its budget (Kicked), the broker refuses its logins (node_cooldown) for
// KickCooldown, then twice as long after each disconnection that follows, up to
// MaxKickCooldown; being told again during a cooldown (the rest of a flood, queued
// before the disconnection) changes nothing; after KickCooldownReset without one,
// the next cooldown is KickCooldown again. A connection admitted before is not
// refused at a reload, other keys are not refused, and a key that is no live node's
// is not recorded. Before, a host disconnected for its budget was admitted again at
// once.
func TestANodeKickedForItsBudgetCoolsDown(t *testing.T) {
	fx := newFixture(t)
	a := fx.auth("")
	web1 := &logins{t: t, kp: fx.web1}
	admitted := web1.next()
	if _, err := a.Authenticate(admitted); err != nil {
		t.Fatal(err)
	}
	// cooled kicks the key now, and checks that its logins are refused for want and
	// admitted after.
	cooled := func(want time.Duration) {
		t.Helper()
		a.Kicked(pub(fx.web1))
		start := fx.clock
		for _, at := range []time.Duration{0, want / 2, want - time.Millisecond} {
			fx.clock = start.Add(at)
			if _, err := a.Authenticate(web1.next()); !errors.Is(err, ErrNodeCooldown) {
				t.Fatalf("%s into a cooldown of %s: %v, want ErrNodeCooldown", at, want, err)
			}
			// The rest of the flood, told after the disconnection: no longer.
			a.Kicked(pub(fx.web1))
		}
		fx.clock = start.Add(want)
		if _, err := a.Authenticate(web1.next()); err != nil {
			t.Fatalf("at the end of a cooldown of %s: %v", want, err)
		}
	}
	want := KickCooldown
	for range 10 {
		cooled(want)
		want = min(2*want, MaxKickCooldown)
	}
	if want != MaxKickCooldown {
		t.Fatalf("ten disconnections in a row reach %s, want the most, %s", want, MaxKickCooldown)
	}
	if got := broker.RefusalCode(ErrNodeCooldown); got != "node_cooldown" {
		t.Errorf("the refusal's code is %q", got)
	}
	// A connection admitted before, checked again at a reload during a cooldown.
	a.Kicked(pub(fx.web1))
	recheck := admitted
	recheck.Recheck = true
	if _, err := a.Authenticate(recheck); err != nil {
		t.Fatalf("a connection admitted before, checked again during a cooldown: %v", err)
	}
	if _, err := a.Authenticate((&logins{t: t, kp: fx.newDB}).next()); err != nil {
		t.Fatalf("another key during web-1's cooldown: %v", err)
	}
	// Quiet for KickCooldownReset after the cooldown's end: the next is the first's.
	fx.clock = fx.clock.Add(MaxKickCooldown + KickCooldownReset)
	cooled(KickCooldown)
	cooled(2 * KickCooldown)

	// Keys that are no live node's are not recorded: a revoked one, an enrolling
	// client's, one the mesh never knew.
	before := a.Entries().NodeCooldowns
	a.Kicked(pub(fx.gone))
	a.Kicked(pub(mustKey(t, nkeys.CreateUser)))
	if got := a.Entries().NodeCooldowns; got != before {
		t.Fatalf("keys that are no live node's recorded: %d cooldowns, want %d", got, before)
	}
	if _, err := a.Authenticate((&logins{t: t, kp: fx.gone}).next()); err != nil {
		t.Fatalf("a revoked key told of as kicked: %v", err)
	}
	// Each cooldown is logged, a few an interval: the node, and for how long.
	if logs := fx.logs.String(); !strings.Contains(logs, `refused on this broker for a while" node=web-1 key=`+pub(fx.web1)+" for=1s in_a_row=1") ||
		!strings.Contains(logs, "for=1m0s in_a_row=7") {
		t.Errorf("the cooldowns are not logged with the node, their length and their count:\n%s", logs)
	}
}

// TestNodeLoginTablesAreSwept: the logins counted for a key and its cooldown are
// forgotten by a Sweep once they limit nothing (a span after its last login; the
// reset after its cooldown's end), kept before, and counted by Entries.
func TestNodeLoginTablesAreSwept(t *testing.T) {
	fx := newFixture(t)
	a := New(Config{Roster: fx.fsm, Mesh: "demo", Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return fx.clock }})
	web1 := &logins{t: t, kp: fx.web1}
	if _, err := a.Authenticate(web1.next()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate((&logins{t: t, kp: fx.newDB}).next()); err != nil {
		t.Fatal(err)
	}
	a.Kicked(pub(fx.web1))
	if got, want := a.Entries(), (Entries{NodeLogins: 2, NodeCooldowns: 1}); got != want {
		t.Fatalf("after two logins and a disconnection: %+v, want %+v", got, want)
	}
	fx.clock = fx.clock.Add(NodeLoginSpan - time.Millisecond)
	a.Sweep()
	if got, want := a.Entries(), (Entries{NodeLogins: 2, NodeCooldowns: 1}); got != want {
		t.Fatalf("a sweep within the span: %+v, want %+v", got, want)
	}
	fx.clock = fx.clock.Add(time.Millisecond)
	a.Sweep()
	if got, want := a.Entries(), (Entries{NodeCooldowns: 1}); got != want {
		t.Fatalf("a sweep a span after the logins: %+v, want %+v", got, want)
	}
	fx.clock = now0.Add(KickCooldown + KickCooldownReset - time.Millisecond)
	a.Sweep()
	if got, want := a.Entries(), (Entries{NodeCooldowns: 1}); got != want {
		t.Fatalf("a sweep before the reset: %+v, want %+v", got, want)
	}
	fx.clock = fx.clock.Add(time.Millisecond)
	a.Sweep()
	if got := a.Entries(); got != (Entries{}) {
		t.Fatalf("a sweep after the reset: %+v, want nothing", got)
	}
}

// TestNodeLoginTablesAreSweptUnderAFlood: between Sweeps, the tables of node logins
// and cooldowns are swept as the others are, once they pass the floor, so that no
// number of keys grows them past what the spans keep.
func TestNodeLoginTablesAreSweptUnderAFlood(t *testing.T) {
	now := now0
	w := &window{limit: NodeLogins, span: NodeLoginSpan, m: map[string][]admitted{}, sweep: sweeper{floor: 10}}
	c := &cooldowns{first: KickCooldown, most: MaxKickCooldown, reset: KickCooldownReset, m: map[string]*cooldown{}, sweep: sweeper{floor: 10}}
	for i := range 1000 {
		key := fmt.Sprintf("key-%d", i)
		w.admit(key, "c", now)
		c.kicked(key, now)
		now = now.Add(KickCooldownReset / 100)
	}
	// The window's keys live NodeLoginSpan; the cooldowns' their cooldown and the
	// reset: 101 keys' worth of time, swept at twice what the last sweep left.
	if n := w.len(); n > 2*10+1 {
		t.Errorf("the window holds %d keys, want at most %d", n, 2*10+1)
	}
	if n := c.len(); n > 2*102+1 {
		t.Errorf("the cooldowns hold %d keys, want at most %d", n, 2*102+1)
	}
}
