package authn

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"mesh/broker"
)

// TestSweepForgetsWhatLimitsNobody: a token used to log in, a revoked key let in to
// hear its notice and an address that failed each leave an entry in the
// Authenticator's tables, needed for their span. Once the span is over, a Sweep
// forgets them; before it, it keeps them. Before Sweep, the tables were swept only
// past 100,000 keys: a control node kept an entry for every token ever used and every
// key ever revoked, for as long as it ran.
func TestSweepForgetsWhatLimitsNobody(t *testing.T) {
	fx := newFixture(t)
	a := New(Config{Roster: fx.fsm, Mesh: "demo", Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return fx.clock }})
	session := binding(1)
	conns := 0
	nonce := func() []byte { conns++; return []byte(fmt.Sprintf("nonce-%d", conns)) }
	if _, err := a.Authenticate(proving(t, "web-2", fx.secret, mustKey(t, nkeys.CreateUser), nonce(), session)); err != nil {
		t.Fatalf("an enrolling login: %v", err)
	}
	n := nonce()
	if _, err := a.Authenticate(broker.Client{Nkey: pub(fx.gone), Nonce: n, Sig: sign(t, fx.gone, n)}); err != nil {
		t.Fatalf("a revoked key's login: %v", err)
	}
	if _, err := a.Authenticate(enrolling(t, "web-2", "00"+fx.secret[2:], mustKey(t, nkeys.CreateUser), nonce())); err == nil {
		t.Fatal("a wrong secret was let in")
	}
	want := Entries{TokenLogins: 1, RevokedLogins: 1, FailedAddresses: 1}
	if got := a.Entries(); got != want {
		t.Fatalf("after the logins: %+v, want %+v", got, want)
	}
	// Within every span, a sweep keeps them all.
	fx.clock = fx.clock.Add(RevokedConnectionLifetime - time.Second)
	a.Sweep()
	if got := a.Entries(); got != want {
		t.Fatalf("a sweep within the spans: %+v, want %+v kept", got, want)
	}
	// Past the revoked key's span, its entry goes; past the token's, the token's;
	// past the failure window (a minute here), the address's.
	fx.clock = fx.clock.Add(2 * time.Second)
	a.Sweep()
	if got, want := a.Entries(), (Entries{TokenLogins: 1, FailedAddresses: 1}); got != want {
		t.Fatalf("past the revoked key's span: %+v, want %+v", got, want)
	}
	fx.clock = fx.clock.Add(EnrolConnectionLifetime)
	a.Sweep()
	if got, want := a.Entries(), (Entries{FailedAddresses: 1}); got != want {
		t.Fatalf("past the enrolling connection's lifetime: %+v, want %+v", got, want)
	}
	fx.clock = fx.clock.Add(time.Minute)
	a.Sweep()
	if got := a.Entries(); got != (Entries{}) {
		t.Fatalf("past the failure window: %+v, want nothing", got)
	}
}
