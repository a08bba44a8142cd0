package integration

import (
	"bytes"
	"crypto/tls"
	"net"
	"testing"
	"time"

	"mesh/controlplane/datadir"
	"mesh/controlplane/pki"
	"mesh/integration/harness"
)

// TestEveryPortSpeaksTLS13First (security.md, the broker: "TLS 1.3 only, handshake
// first: no NATS protocol byte crosses in clear"): a control node's client, cluster
// and Raft ports send nothing in clear to a client that connects and waits, nor to
// one that speaks NATS in clear (CONNECT, PING); each refuses a client that offers
// TLS 1.2 at most, and completes a TLS 1.3 handshake (the positive control: the
// probe reaches a TLS server).
func TestEveryPortSpeaksTLS13First(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "tls13")
	cp.Serve()
	cfg, err := datadir.Dir(cp.Dir).LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	pin, err := cfg.Pin()
	if err != nil {
		t.Fatal(err)
	}
	for _, port := range []struct{ name, addr string }{{"client", cp.Listen}, {"cluster", cp.Cluster}, {"raft", cp.Raft}} {
		t.Run(port.name, func(t *testing.T) {
			c, err := net.Dial("tcp", port.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			buf := make([]byte, 4096)
			c.SetReadDeadline(time.Now().Add(time.Second))
			if n, _ := c.Read(buf); n != 0 {
				t.Fatalf("the %s port sent %q in clear to a client that waited", port.name, buf[:n])
			}
			c.Write([]byte("CONNECT {\"verbose\":true}\r\nPING\r\n"))
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			var got bytes.Buffer
			for {
				n, err := c.Read(buf)
				got.Write(buf[:n])
				if err != nil {
					break
				}
			}
			for _, word := range []string{"INFO", "PONG", "+OK", "-ERR"} {
				if bytes.Contains(got.Bytes(), []byte(word)) {
					t.Fatalf("the %s port answered NATS in clear: %q", port.name, got.Bytes())
				}
			}

			old := pki.PinnedClientConfig(pin)
			old.MinVersion, old.MaxVersion = tls.VersionTLS10, tls.VersionTLS12
			if c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", port.addr, old); err == nil {
				c.Close()
				t.Fatalf("the %s port completed a TLS 1.2 handshake", port.name)
			}

			cur := pki.PinnedClientConfig(pin)
			tc, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", port.addr, cur)
			if err != nil {
				t.Fatalf("the %s port refused a TLS 1.3 handshake with the mesh's pin: %v", port.name, err)
			}
			defer tc.Close()
			if v := tc.ConnectionState().Version; v != tls.VersionTLS13 {
				t.Fatalf("the %s port negotiated %s", port.name, tls.VersionName(v))
			}
		})
	}
}
