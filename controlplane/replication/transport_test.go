package replication

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"mesh/controlplane/pki"
)

func leafConfig(t *testing.T, ca *pki.CA) *tls.Config {
	t.Helper()
	leaf, err := ca.IssueLeaf("control test", []net.IP{net.ParseIP("127.0.0.1")}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pki.MutualConfig(leaf, ca.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func newCA(t *testing.T, name string) *pki.CA {
	t.Helper()
	ca, _, err := pki.NewCA(name, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// TestRaftPortRefusesStrangers: only a peer with a leaf of the mesh CA completes a
// handshake on the Raft port. A host has no certificate at all; an impostor has one
// from another CA; a silent peer is cut off at the handshake deadline.
func TestRaftPortRefusesStrangers(t *testing.T) {
	mesh := newCA(t, "mesh")
	stream, err := newTLSStream("127.0.0.1:0", nil, leafConfig(t, mesh), nil, nil, slog.New(slog.DiscardHandler), nil, 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	addr := stream.Addr().String()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := stream.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()

	dial := func(cfg *tls.Config) error {
		raw, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return err
		}
		defer raw.Close()
		c := tls.Client(raw, cfg)
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		if err := c.Handshake(); err != nil {
			return err
		}
		// In TLS 1.3 a refused client certificate surfaces on the first read.
		_, err = c.Read(make([]byte, 1))
		return err
	}
	noCert := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13} //nolint:gosec // a host dialling with what it has
	if err := dial(noCert); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a client without a certificate was not refused: %v", err)
	}
	other := leafConfig(t, newCA(t, "other"))
	other.ServerName = "127.0.0.1"
	if err := dial(other); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a client with another CA's leaf was not refused: %v", err)
	}
	select {
	case <-accepted:
		t.Fatal("a refused peer reached Raft")
	case <-time.After(200 * time.Millisecond):
	}
	if n := stream.failedHandshakes.Load(); n != 2 {
		t.Errorf("%d failed handshakes counted, want 2", n)
	}

	// A silent peer: the server closes it at the deadline.
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	start := time.Now()
	_ = raw.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = raw.Read(make([]byte, 1))
	if waited := time.Since(start); err == nil || waited > 3*time.Second {
		t.Fatalf("a silent peer was held %s (err %v), want closed at the 500ms handshake deadline", waited, err)
	}

	// A genuine peer gets through, by Dial.
	peer, err := newTLSStream("127.0.0.1:0", nil, leafConfig(t, mesh), nil, nil, slog.New(slog.DiscardHandler), nil, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	c, err := peer.Dial(serverAddress(addr), time.Second)
	if err != nil {
		t.Fatalf("a mesh peer could not dial: %v", err)
	}
	defer c.Close()
	select {
	case got := <-accepted:
		got.Close()
	case <-time.After(2 * time.Second):
		t.Fatal("the mesh peer was not accepted")
	}
}

func serverAddress(a string) raft.ServerAddress { return raft.ServerAddress(a) }

// TestRaftPortBoundsHandshakes: strangers opening sockets on the Raft port and saying
// nothing held a descriptor and a goroutine each until the handshake deadline, with
// no bound: in an audit they took every descriptor of serve, and Raft's redials to
// its peers failed meanwhile. One address holds at most maxHandshakesPerSource
// handshakes (the next connection is closed at once), all together at most
// maxHandshakes (the oldest of a stranger's gives way, never a member's address's:
// strangers opening connections faster than a handshake takes pushed every
// handshake out, a peer's too), and a peer's handshake still completes.
func TestRaftPortBoundsHandshakes(t *testing.T) {
	mesh := newCA(t, "mesh")
	stream, err := newTLSStream("127.0.0.1:0", nil, leafConfig(t, mesh), nil, nil, slog.New(slog.DiscardHandler), nil, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	addr := stream.Addr().String()
	go func() {
		for {
			c, err := stream.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	from := func(src string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	closedSoon := func(c net.Conn) bool {
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err := c.Read(make([]byte, 1))
		return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
	}
	settle := func(want int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for stream.gate.inProgress() != want && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if got := stream.gate.inProgress(); got != want {
			t.Fatalf("%d handshakes in progress, want %d", got, want)
		}
	}

	// A member's address: learnt as the stream dials it, or from its configuration.
	stream.gate.learnPeer(netip.MustParseAddr("127.0.3.1"))
	peerSilent := from("127.0.3.1")

	// One address: the first maxHandshakesPerSource are held, the next is closed.
	var first []net.Conn
	for range maxHandshakesPerSource {
		first = append(first, from("127.0.0.2"))
	}
	settle(1 + maxHandshakesPerSource)
	if !closedSoon(from("127.0.0.2")) {
		t.Fatal("a connection past its address's bound was held")
	}

	// Many addresses: never more than maxHandshakes, the oldest closed first.
	for i := range maxHandshakes / maxHandshakesPerSource {
		for range maxHandshakesPerSource {
			from(fmt.Sprintf("127.0.1.%d", i+1))
		}
	}
	settle(1 + maxHandshakes)
	if !closedSoon(first[0]) {
		t.Fatal("the oldest handshake was not closed when all were at the bound")
	}
	// The member's, older than every stranger's, was not the one pushed out.
	_ = peerSilent.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := peerSilent.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a member's handshake was pushed out by strangers': %v", err)
	}

	// A peer from another address completes its handshake meanwhile.
	raw := from("127.0.2.1")
	cfg := leafConfig(t, mesh)
	cfg.ServerName = "127.0.0.1"
	c := tls.Client(raw, cfg)
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := c.Handshake(); err != nil {
		t.Fatalf("a peer's handshake while strangers hold the port: %v", err)
	}
}
