package broker_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/broker"
	"mesh/controlplane/pki"
)

// strangerInfo completes the TLS handshake with s, as anyone on the network can
// (no credentials), and returns the INFO the broker sends before any login.
func strangerInfo(t *testing.T, s *broker.Server, pin [32]byte) map[string]any {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", s.Addr(), pki.PinnedClientConfig(pin))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	text, ok := strings.CutPrefix(strings.TrimSpace(line), "INFO ")
	if !ok {
		t.Fatalf("the broker's first line is %q, not its INFO", line)
	}
	var info map[string]any
	if err := json.Unmarshal([]byte(text), &info); err != nil {
		t.Fatalf("INFO %s: %v", text, err)
	}
	return info
}

// TestAStrangerIsToldNoBrokerAddresses: anyone who completes the TLS handshake with
// a broker reads its INFO, credentials or not. nats-server lists there the client
// address of every broker of its cluster (connect_urls), and nats.go adds those
// addresses, signed by nobody, to the brokers a client dials. Before, a stranger
// learned every control node's address from any one of them, and every client
// dialled whatever a broker's INFO listed. The brokers no longer advertise one
// another: a stranger reads the name and address of the broker it reached, the
// versions, and nothing of the others; a client logged in is told of no other
// broker either. Clients learn the brokers from the signed membership and their own
// configuration (docs/security.md, "What a stranger sees").
func TestAStrangerIsToldNoBrokerAddresses(t *testing.T) {
	t.Parallel() // waits for routes
	m := newMesh(t)
	mutual, err := pki.MutualConfig(m.leaf, m.ca.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	ports := freePorts(t, 2)
	auth := byToken(map[string]broker.Grant{"t": everything("x", broker.AccountControl)})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var brokers []*broker.Server
	for i, name := range []string{"cp-1", "cp-2"} {
		s, err := broker.Start(ctx, broker.Config{Mesh: "test", Flows: testFlows, Name: name, Listen: "127.0.0.1:0", TLS: m.server, Auth: auth, Logger: slog.New(slog.DiscardHandler),
			Cluster: &broker.ClusterConfig{Listen: ports[i], Routes: []string{ports[1-i]}, TLS: mutual}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Shutdown)
		brokers = append(brokers, s)
	}
	waitFor(t, func() bool { return broker.RoutedTo(brokers[0])["cp-2"] && broker.RoutedTo(brokers[1])["cp-1"] })
	clients := []*client{mustDial(t, brokers[0], m.ca.Pin(), nats.Token("t")), mustDial(t, brokers[1], m.ca.Pin(), nats.Token("t"))}

	// nats-server adds a peer's addresses as its route registers, and tells the
	// clients connected then: a second is long enough for both.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		for i, s := range brokers {
			info := strangerInfo(t, s, m.ca.Pin())
			other := brokers[1-i].Addr()
			if urls, ok := info["connect_urls"]; ok {
				t.Fatalf("a stranger reading %s's INFO is told the brokers' client addresses: %v", info["server_name"], urls)
			}
			if text, _ := json.Marshal(info); strings.Contains(string(text), other) {
				t.Fatalf("a stranger reading %s's INFO is told %s, the other broker's address: %s", info["server_name"], other, text)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i, c := range clients {
		if found := c.nc.DiscoveredServers(); len(found) != 0 {
			t.Errorf("a client of %s was told of the brokers %v", brokers[i].Addr(), found)
		}
	}
	t.Logf("what a stranger reads: %v", strangerInfo(t, brokers[0], m.ca.Pin()))
}
