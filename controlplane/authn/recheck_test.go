package authn

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"mesh/broker"
	"mesh/controlplane/state"
)

// TestRecheckLooksAtTheRoster: nats-server asks again about every connected client
// on each configuration reload. The answer follows the roster as it is now (a key
// revoked since goes to the revoked account, which the broker refuses as a change
// of account; an operator whose node was removed gets the read-only grant), and an
// unbound login is not counted a second time.
func TestRecheckLooksAtTheRoster(t *testing.T) {
	fx := newFixture(t)
	nonce := []byte("server-nonce-1234")
	session := binding(7)
	var heard []string
	a := fx.auth("")
	a.cfg.Unbound = func(kind string) { heard = append(heard, kind) }
	web1 := broker.Client{Nkey: pub(fx.web1), Nonce: nonce, Binding: session, Sig: sign(t, fx.web1, nonce), Remote: remote1}
	if g, err := a.Authenticate(web1); err != nil || g.Account != broker.AccountHosts || len(heard) != 1 {
		t.Fatalf("login: %+v, %v, counted %v", g, err, heard)
	}
	again := web1
	again.Recheck = true
	if g, err := a.Authenticate(again); err != nil || g.Account != broker.AccountHosts || len(heard) != 1 {
		t.Fatalf("recheck: %+v, %v, counted %v; want the same grant, not counted again", g, err, heard)
	}
	fx.apply(t, state.Command{Op: state.OpRevoke, At: now0, Revoke: &state.RevokeCmd{Node: "web-1"}})
	if g, err := a.Authenticate(again); err == nil && g.Account != broker.AccountRevoked {
		t.Fatalf("recheck of a key revoked since: %+v, want the revoked account or a refusal", g)
	}
	// An enrolling client: counted once; its token looked at again (cancelled since:
	// its grant is then the short one that can only be refused).
	newKey := mustKey(t, nkeys.CreateUser)
	enrol := enrolling(t, "web-2", fx.secret, newKey, nonce)
	heard = heard[:0]
	first, err := a.Authenticate(enrol)
	if err != nil || len(heard) != 1 {
		t.Fatalf("enrolling login: %v, counted %v", err, heard)
	}
	enrol.Recheck = true
	if g, err := a.Authenticate(enrol); err != nil || len(heard) != 1 || g.Deadline != first.Deadline {
		t.Fatalf("enrolling recheck: %+v, %v, counted %v; want the same grant, not counted again", g, err, heard)
	}
	fx.apply(t, state.Command{Op: state.OpCancelTokens, At: now0, CancelTokens: &state.CancelTokensCmd{Node: "web-2"}})
	if g, err := a.Authenticate(enrol); err == nil && !g.Deadline.Before(first.Deadline) {
		t.Fatalf("recheck of a client whose token was cancelled since: %+v, want a refusal or the short grant", g)
	}

	unknown := mustKey(t, nkeys.CreateUser)
	stranger := broker.Client{Nkey: pub(unknown), Nonce: nonce, Sig: sign(t, unknown, nonce), Remote: remote1, Recheck: true}
	if _, err := a.Authenticate(stranger); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("recheck of a key the roster does not hold: %v, want ErrUnknownKey", err)
	}
}

// BenchmarkRecheck: what a configuration reload costs per connected host (nats-server
// asks the hook again about each), beside what the host's login cost, in process.
// go test -run='^$' -bench=Recheck ./controlplane/authn/
func BenchmarkRecheck(b *testing.B) {
	fx := newFixture(b)
	nonce := []byte("server-nonce-1234")
	session := binding(7)
	a := fx.auth("")
	login := broker.Client{Nkey: pub(fx.web1), Nonce: nonce, Binding: session, Sig: sign(b, fx.web1, broker.BoundNonce(nonce, session)), Remote: remote1}
	recheck := login
	recheck.Recheck = true
	for _, c := range []struct {
		name   string
		client broker.Client
	}{{"login", login}, {"recheck", recheck}} {
		b.Run(c.name, func(b *testing.B) {
			start := time.Now()
			for range b.N {
				if _, err := a.Authenticate(c.client); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N), "µs/check")
		})
	}
}
