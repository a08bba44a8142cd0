package agent

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"mesh/host/identity"
)

// refusingBroker answers at an address with a leaf of the fixture's mesh CA, as a
// control node since removed could, and refuses every client's credentials, as the
// real mesh refuses an unknown key: the agent's pin check passes, its login does not.
func refusingBroker(t *testing.T, f *fixture) (addr string, logins *atomic.Int32) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "removed control node"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, f.ca, &key.PublicKey, f.caKey)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{MinVersion: tls.VersionTLS13,
		Certificates: []tls.Certificate{{Certificate: [][]byte{der, f.ca.Raw}, PrivateKey: key}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	logins = &atomic.Int32{}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				fmt.Fprintf(c, "INFO %s\r\n", `{"server_id":"x","version":"2.11.0","proto":1,"headers":true,"max_payload":1048576,"tls_required":true,"auth_required":true,"nonce":"bm9uY2U"}`)
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if strings.HasPrefix(strings.ToUpper(line), "CONNECT ") {
						logins.Add(1)
						fmt.Fprint(c, "-ERR 'Authorization Violation'\r\n")
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), logins
}

// TestUnsignedRefusalsDoNotStopTheAgent: a broker that passes the pin check and
// refuses the node's key, time after time, is reported (OnRefused, at every
// AuthFailureLimit-th refusal in a row), and the agent goes on trying: a bare
// refusal is not signed, and anyone with a leaf of the mesh CA can make one. Before,
// the agent stopped for good at the limit (exit 6, which systemd does not restart).
func TestUnsignedRefusalsDoNotStopTheAgent(t *testing.T) {
	f := newFixture(t)
	addr, logins := refusingBroker(t, f)
	id, err := identity.Load(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	id.Brokers = []string{addr}
	if err := os.Remove(identity.Path(f.dir)); err != nil {
		t.Fatal(err)
	}
	if err := identity.Save(f.dir, id); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var reported []error
	a, err := New(Options{StateDir: f.dir, Root: f.root, Logger: slog.New(slog.DiscardHandler), AuthFailureLimit: 2,
		OnRefused: func(err error) { mu.Lock(); reported = append(reported, err); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	deadline := time.Now().Add(15 * time.Second)
	for logins.Load() < 3 {
		select {
		case err := <-done:
			t.Fatalf("the agent stopped after %d refusals: %v", logins.Load(), err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d logins in 15 s", logins.Load())
		}
	}
	mu.Lock()
	got := append([]error(nil), reported...)
	mu.Unlock()
	if len(got) != 1 || !errors.Is(got[0], ErrIdentityRefused) || !strings.Contains(got[0].Error(), "keeps trying") {
		t.Fatalf("OnRefused was told %v, want one ErrIdentityRefused at the 2nd refusal that says the agent keeps trying", got)
	}
	// A node the control plane lost is adopted again from a fresh state directory:
	// the advice named the identity file alone, and the node's applied declaration,
	// secrets included, stayed beside the next enrolment's identity.
	if msg := got[0].Error(); !strings.Contains(msg, "remove the state directory "+f.dir+" (or move it away") || strings.Contains(msg, "identity file") {
		t.Fatalf("the advice to adopt the machine again: %s", msg)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run ended with %v when asked to stop", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not end when asked to stop")
	}
}
