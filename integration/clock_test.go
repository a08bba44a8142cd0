package integration

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"mesh/host/enrol"
	"mesh/integration/harness"
)

func skewed(d time.Duration) func() time.Time { return func() time.Time { return time.Now().Add(d) } }

const declBody = `{"files":[{"path":"f","content":"x"}]}`

// TestClockSkew: ±10 minutes on the host, then on the control plane. Documented
// behaviour (docs/security.md, docs/declarations.md): the mesh's clock decides token
// expiry, the host refuses offline only tokens expired more than 5 minutes by its own
// clock, and declarations are accepted from an hour before issue to 5 minutes after
// expiry.
func TestClockSkew(t *testing.T) {
	converges := func(t *testing.T, m *harness.Mesh, hostClock func() time.Time, ttl time.Duration) {
		t.Helper()
		state, err := harness.EnrolHost(t, m.Token("web-1", ttl).Encode(), hostClock)
		if err != nil {
			t.Fatalf("enrol: %v", err)
		}
		harness.RunAgent(t, state, hostClock)
		v := m.Declare("web-1", declBody)
		m.WaitApplied("web-1", v, 15*time.Second)
	}
	t.Run("host 10 minutes fast", func(t *testing.T) {
		converges(t, harness.StartMesh(t, "skew", harness.Options{}), skewed(10*time.Minute), 15*time.Minute)
	})
	t.Run("host 10 minutes slow", func(t *testing.T) {
		converges(t, harness.StartMesh(t, "skew", harness.Options{}), skewed(-10*time.Minute), 15*time.Minute)
	})
	t.Run("control plane 10 minutes fast", func(t *testing.T) {
		converges(t, harness.StartMesh(t, "skew", harness.Options{Now: skewed(10 * time.Minute)}), nil, 15*time.Minute)
	})
	t.Run("control plane 10 minutes slow", func(t *testing.T) {
		converges(t, harness.StartMesh(t, "skew", harness.Options{Now: skewed(-10 * time.Minute)}), nil, 15*time.Minute)
	})
	t.Run("control plane slow decides a token the host thinks expired", func(t *testing.T) {
		// Minted for 7 minutes by a clock 10 minutes slow: by the host's clock it
		// expired 3 minutes ago, inside the tolerance, so it is presented, and the
		// mesh, whose clock decides, accepts it.
		m := harness.StartMesh(t, "skew", harness.Options{Now: skewed(-10 * time.Minute)})
		if _, err := harness.EnrolHost(t, m.Token("web-1", 7*time.Minute).Encode(), nil); err != nil {
			t.Fatalf("enrol: %v", err)
		}
	})
	t.Run("host fast beyond the token's life", func(t *testing.T) {
		m := harness.StartMesh(t, "skew", harness.Options{})
		_, err := harness.EnrolHost(t, m.Token("web-1", 3*time.Minute).Encode(), skewed(10*time.Minute))
		if !errors.Is(err, enrol.ErrToken) || !strings.Contains(err.Error(), "this machine's clock") {
			t.Fatalf("want an offline refusal naming this machine's clock, got %v", err)
		}
		if _, ok := m.Node("web-1"); ok {
			t.Fatal("the mesh recorded a node for a token refused offline")
		}
	})
	t.Run("host two hours slow, then fixed", func(t *testing.T) {
		// The mesh's certificates, minted at its bootstrap a moment ago, are valid
		// from an hour before it: by this clock, not yet. The pin check says so,
		// naming this machine's clock, not a substituted mesh.
		m := harness.StartMesh(t, "skew", harness.Options{})
		text := m.Token("web-1", 15*time.Minute).Encode()
		state, err := harness.EnrolHost(t, text, skewed(-2*time.Hour))
		if !errors.Is(err, enrol.ErrClock) || errors.Is(err, enrol.ErrSubstituted) || !strings.Contains(err.Error(), "this machine's clock is wrong") {
			t.Fatalf("want the broker refused for this machine's clock, not as a substituted mesh, got %v", err)
		}
		// Fixed clock, same token, same state directory: the same enrolment completes.
		if _, err := enrol.Enrol(t.Context(), enrol.Options{StateDir: state, Token: text}); err != nil {
			t.Fatalf("enrol after fixing the clock: %v", err)
		}
	})
	t.Run("control plane stepped two hours ahead after its bootstrap", func(t *testing.T) {
		// Its certificates are right; the token and the first declaration it
		// stamps are two hours in the host's future, and the declaration's
		// refusal names both clocks (ErrAnswerTime: it was ErrBadAnswer, "does not
		// verify", as if forged).
		var offset atomic.Int64
		m := harness.StartMesh(t, "skew", harness.Options{Now: func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }})
		offset.Store(int64(2 * time.Hour))
		text := m.Token("web-1", 15*time.Minute).Encode()
		state, err := harness.EnrolHost(t, text, nil)
		if !errors.Is(err, enrol.ErrAnswerTime) || !strings.Contains(err.Error(), "check this node's clock, then the control nodes'") || !strings.Contains(err.Error(), "run enrol again with the same token") {
			t.Fatalf("want the first declaration refused as not yet valid, naming both clocks and the run again, got %v", err)
		}
		// The control plane's clock stepped back: it stamps the recorded node's
		// declaration again by it (within a reconcile interval), and the same
		// enrolment completes with the same token and state directory.
		offset.Store(0)
		harness.Eventually(t, 15*time.Second, "the control plane stamps the declaration again", func() bool {
			return strings.Contains(m.Log(), "declarations issued in this node's future")
		})
		if _, err := enrol.Enrol(t.Context(), enrol.Options{StateDir: state, Token: text}); err != nil {
			t.Fatalf("enrol after the control plane's clock is right: %v", err)
		}
	})
}
