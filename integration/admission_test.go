package integration

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"testing"
	"time"

	"mesh/controlplane/daemon"
	"mesh/controlplane/operator"
	"mesh/controlplane/pki"
	"mesh/integration/harness"
)

// A control node's broker holds hosts' TLS handshakes until the node serves (Run),
// so that a fleet reconnecting to a restarted node does not share the cores with
// the rest of its start; an operator's handshake is never held.
func TestBrokerHoldsHostsUntilTheNodeServes(t *testing.T) {
	m := harness.BootstrapMesh(t, "held", harness.Options{})
	d, err := daemon.Open(context.Background(), daemon.Options{
		Dir: m.Dir, Logger: slog.New(slog.DiscardHandler), Timeouts: harness.FastRaft(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	e, err := operator.DirEndpoint(m.Dir, false)
	if err != nil {
		t.Fatal(err)
	}

	hostDone := make(chan error, 1)
	go func() {
		// The agent's handshake: pinned, no application protocol.
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", d.BrokerAddr(), pki.PinnedClientConfig(e.Pin))
		if err == nil {
			c.Close()
		}
		hostDone <- err
	}()
	op, err := operator.DialEndpoint(e, operator.Options{Timeout: 2 * time.Second, LeaderWait: -1})
	if err != nil {
		t.Fatalf("an operator could not connect to a starting node: %v", err)
	}
	op.Close()
	select {
	case err := <-hostDone:
		t.Fatalf("a host's handshake completed before the node served (err %v)", err)
	case <-time.After(300 * time.Millisecond):
	}

	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() {
		_ = d.Run(ctx)
		close(ran)
	}()
	defer func() {
		cancel()
		<-ran
	}()
	select {
	case err := <-hostDone:
		if err != nil {
			t.Fatalf("host handshake once the node serves: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a host's handshake was still held 10 s after the node began to serve")
	}
}
