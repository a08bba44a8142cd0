package broker_test

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"mesh/broker"
)

// TestEventCountsCountEveryEvent: the log shows a few lines of each kind of refusal
// and violation every interval; the counts, which the metrics export, have every one,
// by the refusal's reason and the violation's kind, never by what the client chose.
func TestEventCountsCountEveryEvent(t *testing.T) {
	m := newMesh(t)
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	auth := hostAuth(pub)
	s, _ := startJSON(t, m, auth)
	if got := s.EventCounts(); len(got.Refused) != 0 || len(got.Violations) != 0 {
		t.Fatalf("counts before anything happened: %+v", got)
	}

	const refusals = 12
	for i := range refusals {
		if _, err := dial(t, s, m.ca.Pin(), nats.UserInfo(fmt.Sprintf("guess-%d", i), "wrong")); err == nil {
			t.Fatal("a refused client connected")
		}
	}
	host := mustDial(t, s, m.ca.Pin(), nats.Nkey(pub, kp.Sign), nats.CustomInboxPrefix("_INBOX.node.a"))
	const violations = 300
	for i := range violations {
		host.nc.Publish(forbidden(i), []byte("forged"))
	}
	if err := host.nc.Flush(); err != nil {
		t.Fatal(err)
	}

	got := s.EventCounts()
	if len(got.Refused) != 1 {
		t.Fatalf("refusals counted under %d reasons, want 1 (the reason, not the user the client chose): %v", len(got.Refused), got.Refused)
	}
	for reason, n := range got.Refused {
		if reason != broker.CodeRefused {
			t.Errorf("refusals counted under %q, want the refusal's code %q", reason, broker.CodeRefused)
		}
		if n != refusals {
			t.Errorf("%d refusals counted for %q, want %d", n, reason, refusals)
		}
	}
	if len(got.Violations) != 1 {
		t.Fatalf("violations counted under %d kinds, want 1 (not one a subject): %v", len(got.Violations), got.Violations)
	}
	for k, n := range got.Violations {
		if n != violations || k.What != "Publish Violation - Subject" || k.Account == "" {
			t.Errorf("%d violations counted as %+v, want %d publish violations in an account", n, k, violations)
		}
	}
}
