package enrol

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"mesh/host/wire"
)

// A real nats-server on loopback: what matters here is how a broker answers a
// request that no control node listens to yet.
func startBroker(t *testing.T) *nats.Conn {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(s.Shutdown)
	if !s.ReadyForConnections(5 * time.Second) {
		t.Fatal("broker not ready")
	}
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func TestRequestServedWaitsOutALeaderlessMoment(t *testing.T) {
	nc := startBroker(t)
	go func() {
		time.Sleep(300 * time.Millisecond)
		_, _ = nc.Subscribe("mesh.enrol.web-1", func(m *nats.Msg) { _ = m.Respond([]byte("ok")) })
	}()
	msg, err := requestServed(context.Background(), nc, "mesh.enrol.web-1", []byte("{}"), 5*time.Second)
	if err != nil || string(msg.Data) != "ok" {
		t.Fatalf("want the answer once a control node serves, got %v", err)
	}
}

func TestRequestServedGivesUpAtTheTimeout(t *testing.T) {
	nc := startBroker(t)
	start := time.Now()
	_, err := requestServed(context.Background(), nc, "mesh.enrol.web-1", []byte("{}"), 500*time.Millisecond)
	if !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("want no responders, got %v", err)
	}
	if took := time.Since(start); took < 300*time.Millisecond || took > 3*time.Second {
		t.Fatalf("gave up after %s, want about the 500 ms timeout", took)
	}
}

// TestRefusalSaysItsAdviceOnce: the mesh's message speaks to an operator ("mint a
// new token"), the agent's advice to the person at the machine; the refusal says
// the latter once.
func TestRefusalSaysItsAdviceOnce(t *testing.T) {
	for _, c := range []struct{ code, message, want string }{
		{wire.CodeTokenUsed, "this token already enrolled a node; mint a new token",
			"this token already enrolled a node; ask the operator for a new one"},
		{wire.CodeTokenStaleKey, "the token names a signing key the mesh no longer holds (rotated): mint a new token",
			"the token names a signing key the mesh no longer holds (rotated); ask the operator for a new one"},
		{wire.CodeTokenCancelled, "this token was cancelled by an operator; ask for a new one",
			"(token_cancelled): this token was cancelled by an operator; ask the operator for a new one"},
		{"some_new_code", "something; mint a new token", "something; mint a new token"},
		// What the mesh adds after its advice is kept (a CLI audit saw the advice twice).
		{wire.CodeTokenExpired, "this token has expired; mint a new token (it expired 1s ago)",
			"(token_expired): this token has expired (it expired 1s ago); ask the operator for a new token"},
		{wire.CodeInternal, "sign the declaration: disk full", "(internal): sign the declaration: disk full; run enrol again with the same token"},
	} {
		got := (&RefusedError{Code: c.code, Message: c.message}).Error()
		// What happened is said once too: the mesh's words, not the advice again
		// ("cancelled by an operator; the operator cancelled this token").
		if !strings.Contains(got, c.want) || strings.Count(got, "new token")+strings.Count(got, "new one") > 1 ||
			strings.Count(got, "cancelled by an operator")+strings.Count(got, "cancelled this token") > 1 || strings.Count(got, "rotated") > 1 {
			t.Errorf("%s: %q, want it to contain %q and its advice once", c.code, got, c.want)
		}
	}
}
