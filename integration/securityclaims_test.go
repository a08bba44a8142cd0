package integration

import (
	"bytes"
	"crypto/tls"
	"encoding/hex"
	"net"
	"sync"
	"testing"
	"time"

	"mesh/controlplane/datadir"
	"mesh/controlplane/pki"
	"mesh/integration/harness"
	"mesh/tokenfmt"
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

// recordingConn keeps every byte its peer sent.
type recordingConn struct {
	net.Conn
	mu  *sync.Mutex
	got *bytes.Buffer
}

func (c recordingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.got.Write(p[:n])
	c.mu.Unlock()
	return n, err
}

// TestNothingOfTheMeshLeavesBeforeThePin (security.md, enrolment step 3: "the
// impostor receives zero application bytes and no credential"): what an enrolling
// host sends to a TLS server under another CA, everything before the pin check
// aborts the handshake, names nothing of the mesh: no server name, no application
// protocol, and none of the token's mesh, node, secret, signing key or pin in any
// form, in any byte on the wire.
func TestNothingOfTheMeshLeavesBeforeThePin(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "hellomeshname")
	cp.Serve()
	var mu sync.Mutex
	var wire bytes.Buffer
	var hellos []tls.ClientHelloInfo
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	cfg := harness.OtherCATLS(t, raw.Addr().String())
	cfg.GetConfigForClient = func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		mu.Lock()
		hellos = append(hellos, *h)
		mu.Unlock()
		return nil, nil
	}
	go func() {
		for {
			c, err := raw.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				tc := tls.Server(recordingConn{c, &mu, &wire}, cfg)
				tc.SetDeadline(time.Now().Add(10 * time.Second))
				if tc.Handshake() == nil {
					tc.Read(make([]byte, 1024))
				}
			}()
		}
	}()
	tok, err := tokenfmt.Parse(cp.Token("clienthello-node"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tok.Brokers = mustAddrs(t, raw.Addr().String())
	h := harness.NewHost(t, bin, "clienthello-node")
	if r := h.Enrol(tok.Encode()); r.Code != hostExitSubstituted {
		t.Fatalf("exit %d, want %d (substituted):\n%s", r.Code, hostExitSubstituted, r.Combined())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(hellos) == 0 || wire.Len() == 0 {
		t.Fatal("the host never reached the server under another CA: the test proves nothing")
	}
	for _, h := range hellos {
		if h.ServerName != "" || len(h.SupportedProtos) != 0 {
			t.Fatalf("the ClientHello names server %q, protocols %q", h.ServerName, h.SupportedProtos)
		}
	}
	secrets := map[string][]byte{
		"mesh": []byte(tok.Mesh), "node": []byte(tok.Node),
		"secret": tok.Secret[:], "secret (hex)": []byte(hex.EncodeToString(tok.Secret[:])),
		"signing key": tok.SigningKey, "signing key (hex)": []byte(hex.EncodeToString(tok.SigningKey)),
		"pin": tok.CAPin[:], "pin (hex)": []byte(hex.EncodeToString(tok.CAPin[:])),
	}
	for what, b := range secrets {
		if bytes.Contains(wire.Bytes(), b) {
			t.Errorf("the token's %s crossed the wire to a server under another CA", what)
		}
	}
}
