package agent

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"math/big"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/declarations"
	"mesh/host/link"
)

// BenchmarkDeclaration measures the whole path an agent runs for one applied
// declaration, the path the fleet benchmark profiles: verify the envelope, apply a
// one-file body on a real file system (replacing the file of the previous
// declaration, as each round of `declare --all` does), persist the applied state,
// and publish the status report over a real nats.go connection with TLS to an
// in-process test broker. Every declaration is a new version with new content, and
// the state holds an accepted keyring, as in the fleet.
//
//	go test -run='^$' -bench=Declaration ./host/agent/
//
// µs/op is wall time per declaration; cpu-µs/op is the process's CPU (user and
// system, all goroutines: nats.go's flusher, the test broker reading the reports,
// the garbage collector) per declaration, which is what the fleet's "agents µs per
// host" counts. ed25519.Verify is the baseline: the bare verification of the same
// signed bytes, in the same run.
func BenchmarkDeclaration(b *testing.B) {
	b.Run("ed25519.Verify", func(b *testing.B) {
		f := newFixtureIn(b, b.TempDir())
		raw := benchDecl(b, f, 1)
		var env declarations.Envelope
		if err := json.Unmarshal(raw, &env); err != nil {
			b.Fatal(err)
		}
		msg := declarations.PAE(env.PayloadType, env.Payload)
		pub := f.key.Public().(ed25519.PublicKey)
		cpu := startCPU()
		for b.Loop() {
			if !ed25519.Verify(pub, msg, env.Signatures[0].Sig) {
				b.Fatal("signature does not verify")
			}
		}
		reportPerDecl(b, cpu, len(raw))
	})
	dirs := []struct{ name, dir string }{{"disk", ""}}
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		// tmpfs, as the fleet benchmark's hosts use.
		dirs = append([]struct{ name, dir string }{{"tmpfs", "/dev/shm"}}, dirs...)
	}
	for _, d := range dirs {
		b.Run(d.name, func(b *testing.B) {
			dir := b.TempDir()
			if d.dir != "" {
				var err error
				if dir, err = os.MkdirTemp(d.dir, "meshhost-bench-"); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { os.RemoveAll(dir) })
			}
			benchApplyPath(b, dir)
		})
	}
}

func benchApplyPath(b *testing.B, dir string) {
	f := newFixtureIn(b, dir)
	ctx := context.Background()
	// An accepted keyring in the state, as every agent of a running mesh has.
	kr, err := declarations.SignKeyring(declarations.Keyring{Mesh: "m", Epoch: 1,
		Keys: f.a.id.SigningKeys, IssuedAt: t0}, f.key)
	if err != nil {
		b.Fatal(err)
	}
	if err := f.a.handle(ctx, kr); err != nil || f.a.keyring.Epoch != 1 {
		b.Fatalf("keyring not accepted: %v %+v", err, f.a.applied)
	}
	broker := startTestBroker(b, f)
	opts, err := link.AsNode(f.a.id, f.a.kp)
	if err != nil {
		b.Fatal(err)
	}
	nc, err := nats.Connect("tls://"+broker.addr, opts...)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	// Version 1 creates the file; each timed declaration replaces it.
	if err := f.a.handle(ctx, benchDecl(b, f, 1)); err != nil || f.a.applied.Version != 1 {
		b.Fatalf("first declaration not applied: %v %+v", err, f.a.applied)
	}
	envs := make([][]byte, b.N)
	for i := range envs {
		envs[i] = benchDecl(b, f, uint64(i+2))
	}
	size := len(envs[0])
	if err := nc.Flush(); err != nil {
		b.Fatal(err)
	}
	reportsBefore := broker.pubs.Load()

	b.ResetTimer()
	cpu := startCPU()
	for i := range b.N {
		if err := f.a.handle(ctx, envs[i]); err != nil {
			b.Fatal(err)
		}
		f.a.report(nc)
		envs[i] = nil
	}
	// Until the broker has answered a PING sent after the last report, so every
	// report's write is in the figures.
	if err := nc.Flush(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	reportPerDecl(b, cpu, size)

	// The figures count only if every declaration was applied and reported.
	if got := f.a.applied; got.Version != uint64(b.N+1) || got.LastErrorCode != "" {
		b.Fatalf("after %d declarations the agent holds version %d, last error %q: %s", b.N, got.Version, got.LastErrorCode, got.LastError)
	}
	want := fmt.Sprintf("# round %d\nnonce = %d\n", b.N+1, b.N+1)
	if got, err := os.ReadFile(f.root + "/etc/fleet.conf"); err != nil || string(got) != want {
		b.Fatalf("the managed file holds %q, %v; want %q", got, err, want)
	}
	if n := broker.pubs.Load() - reportsBefore; n != int64(b.N) {
		b.Fatalf("the broker received %d status reports for %d declarations", n, b.N)
	}
}

// benchDecl signs version v of a one-file declaration like the fleet benchmark's.
func benchDecl(b testing.TB, f *fixture, v uint64) []byte {
	content := fmt.Sprintf("# round %d\nnonce = %d\n", v, v)
	env, err := declarations.SignDeclaration(declarations.Declaration{
		Mesh: "m", Node: "n-1", NodeKey: f.nodeKey, Version: v, KeyringEpoch: 1, IssuedAt: t0, ExpiresAt: t0.Add(24 * time.Hour),
		Body: declarations.Body{Files: []declarations.File{{Path: "etc/fleet.conf", Content: &content, Mode: "0644"}}},
	}, f.key)
	if err != nil {
		b.Fatal(err)
	}
	return env
}

func reportPerDecl(b *testing.B, cpu cpuClock, envelope int) {
	b.ReportMetric(float64(envelope), "envelope-B")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e3, "µs/op")
	if used, ok := cpu.since(); ok {
		b.ReportMetric(float64(used.Nanoseconds())/float64(b.N)/1e3, "cpu-µs/op")
	}
}

// testBroker speaks just enough of the NATS protocol, over TLS with the handshake
// first and a certificate of the fixture's CA, for nats.go to connect as the node
// and publish: it answers CONNECT and PING, and counts and discards PUBs.
type testBroker struct {
	addr string
	pubs atomic.Int64
}

func startTestBroker(b testing.TB, f *fixture) *testBroker {
	b.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "test broker"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, f.ca, &key.PublicKey, f.caKey)
	if err != nil {
		b.Fatal(err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS13,
		Certificates: []tls.Certificate{{Certificate: [][]byte{der, f.ca.Raw}, PrivateKey: key}}}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		b.Fatal(err)
	}
	br := &testBroker{addr: ln.Addr().String()}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go br.serve(c)
		}
	}()
	b.Cleanup(func() { ln.Close(); <-done })
	return br
}

func (br *testBroker) serve(c net.Conn) {
	defer c.Close()
	fmt.Fprintf(c, "INFO {\"server_id\":\"test\",\"version\":\"2.11.0\",\"proto\":1,\"max_payload\":1048576,\"tls_required\":true,\"nonce\":\"bm9uY2U\"}\r\n")
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		op, args, _ := strings.Cut(strings.TrimRight(line, "\r\n"), " ")
		switch strings.ToUpper(op) {
		case "PING":
			if _, err := c.Write([]byte("PONG\r\n")); err != nil {
				return
			}
		case "PUB":
			f := strings.Fields(args)
			n, err := strconv.Atoi(f[len(f)-1])
			if err != nil {
				return
			}
			if _, err := r.Discard(n + 2); err != nil {
				return
			}
			br.pubs.Add(1)
		}
	}
}
