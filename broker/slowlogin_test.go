package broker_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/broker"
)

// TestASlowLoginIsNotPingedFirst: a login the broker takes more than two seconds to
// decide (a control node busy with a fleet reconnecting at once) still connects.
// nats-server pings a client two seconds after its CONNECT by default, and nats.go
// fails a connection whose first answer is that PING instead of its PONG ("expected
// 'PONG', got 'PING'"): meshctl then reported the control plane unreachable.
func TestASlowLoginIsNotPingedFirst(t *testing.T) {
	t.Parallel() // waits out the slow login
	m := newMesh(t)
	auth := &fakeAuth{decide: func(c broker.Client) (broker.Grant, error) {
		time.Sleep(3 * time.Second)
		return everything("slow", broker.AccountOperators), nil
	}}
	s, _ := start(t, m, auth)
	c, err := dial(t, s, m.ca.Pin(), nats.Token("slow"), nats.Timeout(10*time.Second))
	if err != nil {
		t.Fatalf("a login decided in 3 s: %v", err)
	}
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
}
