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
	"io"
	"math/big"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"mesh/declarations"
	"mesh/host/state"
	"mesh/host/wire"
)

// BenchmarkDeclaration measures the whole path an agent runs for one applied
// declaration, the path the fleet benchmark profiles, through the agent's own run
// loop: receive the envelope over a real nats.go connection with TLS from an
// in-process test broker, verify it, apply a one-file body on a real file system
// (replacing the file of the previous declaration, as each round of `declare --all`
// does), persist the applied state, and publish the status report. The broker sends
// the next declaration once the report of the previous one has arrived, so each one
// is handled on its own as in the fleet. Every declaration is a new version with new
// content, and the state holds an accepted keyring, as in a running mesh.
//
//	go test -run='^$' -bench=Declaration ./host/agent/
//
// µs/op is wall time per declaration, round trip included; cpu-µs/op is the
// process's CPU (user and system, every goroutine: the agent's, nats.go's, the
// garbage collector's, and the test broker's side of TLS) per declaration, which is
// what the fleet's "agents µs per host" counts. ed25519.Verify is the baseline: the
// bare verification of the same signed bytes, in the same run.
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
			benchRun(b, dir)
		})
	}
}

func benchRun(b *testing.B, dir string) {
	f := newFixtureIn(b, dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// An accepted keyring in the state, as every agent of a running mesh has.
	kr, err := declarations.SignKeyring(declarations.Keyring{Mesh: "m", Epoch: 1,
		Keys: f.a.id.SigningKeys, IssuedAt: t0}, f.key)
	if err != nil {
		b.Fatal(err)
	}
	if err := f.a.handle(ctx, kr); err != nil || f.a.keyring.Epoch != 1 {
		b.Fatalf("keyring not accepted: %v %+v", err, f.a.applied)
	}
	// Version 1 creates the file; each timed declaration replaces it.
	if err := f.a.handle(ctx, benchDecl(b, f, 1)); err != nil || f.a.applied.Version != 1 {
		b.Fatalf("first declaration not applied: %v %+v", err, f.a.applied)
	}
	envs := make([][]byte, b.N)
	for i := range envs {
		envs[i] = benchDecl(b, f, uint64(i+2))
	}

	broker := startTestBroker(b, f)
	f.a.id.Brokers = []string{broker.addr}
	synced := make(chan struct{}, 1)
	f.a.o.OnSynced = func() {
		select {
		case synced <- struct{}{}:
		default:
		}
	}
	ran := make(chan error, 1)
	go func() { ran <- f.a.Run(ctx) }()
	select {
	case <-synced:
	case err := <-ran:
		b.Fatalf("the agent stopped: %v", err)
	case <-time.After(10 * time.Second):
		b.Fatal("the agent did not connect and sync")
	}
	conn := broker.waitSubscribed(b, f.a.id.Subjects.Declarations)

	b.ResetTimer()
	cpu := startCPU()
	for i, env := range envs {
		version := uint64(i + 2)
		if err := conn.deliver(env); err != nil {
			b.Fatal(err)
		}
		if err := broker.waitReport(version, 10*time.Second); err != nil {
			b.Fatal(err)
		}
		envs[i] = nil
	}
	b.StopTimer()
	reportPerDecl(b, cpu, len(benchDecl(b, f, 2)))
	cancel()
	if err := <-ran; err != nil {
		b.Fatal(err)
	}

	// The figures count only if every declaration was applied, persisted and reported.
	got, err := state.Load(f.dir)
	if err != nil || got.Version != uint64(b.N+1) || got.LastErrorCode != "" {
		b.Fatalf("after %d declarations the state holds version %d, last error %q (%s): %v", b.N, got.Version, got.LastErrorCode, got.LastError, err)
	}
	want := fmt.Sprintf("# round %d\nnonce = %d\n", b.N+1, b.N+1)
	if got, err := os.ReadFile(f.root + "/etc/fleet.conf"); err != nil || string(got) != want {
		b.Fatalf("the managed file holds %q, %v; want %q", got, err, want)
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
// first and a certificate of the fixture's CA, for the agent to connect as its node,
// subscribe, sync and report: it answers CONNECT and PING, acknowledges a sync as
// "nothing to send", delivers the envelopes the benchmark gives it, and passes on
// the versions the status reports name.
type testBroker struct {
	addr    string
	status  string
	sync    string
	reports chan wire.Status
	conns   chan *brokerConn
}

type brokerConn struct {
	c                 net.Conn
	mu                sync.Mutex // one writer at a time: the reader's answers, the deliveries
	subs              map[string]string
	declSubject, decl string // the declaration subject and its sid, once subscribed
	subd              chan struct{}
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
	br := &testBroker{addr: ln.Addr().String(), status: f.a.id.Subjects.Status, sync: f.a.id.Subjects.Sync,
		reports: make(chan wire.Status, 64), conns: make(chan *brokerConn, 4)}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); br.serve(c) }()
		}
	}()
	b.Cleanup(func() { ln.Close(); wg.Wait() })
	return br
}

func (br *testBroker) serve(c net.Conn) {
	defer c.Close()
	bc := &brokerConn{c: c, subs: map[string]string{}, subd: make(chan struct{})}
	br.conns <- bc
	bc.write("INFO {\"server_id\":\"test\",\"version\":\"2.11.0\",\"proto\":1,\"headers\":true,\"max_payload\":1048576,\"tls_required\":true,\"nonce\":\"bm9uY2U\"}\r\n")
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		op, args, _ := strings.Cut(strings.TrimRight(line, "\r\n"), " ")
		f := strings.Fields(args)
		switch strings.ToUpper(op) {
		case "PING":
			bc.write("PONG\r\n")
		case "SUB": // SUB <subject> [queue] <sid>
			bc.mu.Lock()
			bc.subs[f[0]] = f[len(f)-1]
			bc.mu.Unlock()
		case "PUB": // PUB <subject> [reply] <size>
			n, err := strconv.Atoi(f[len(f)-1])
			if err != nil {
				return
			}
			payload := make([]byte, n+2)
			if _, err := io.ReadFull(r, payload); err != nil {
				return
			}
			payload = payload[:n]
			switch {
			case f[0] == br.status:
				var st wire.Status
				if json.Unmarshal(payload, &st) == nil {
					br.reports <- st
				}
			case f[0] == br.sync && len(f) == 3:
				bc.reply(f[1], fmt.Sprintf(`{"v":%d,"sent":0}`, wire.ProtocolVersion))
			}
		}
	}
}

func (bc *brokerConn) write(s string) {
	bc.mu.Lock()
	defer bc.mu.Unlock()
	bc.c.Write([]byte(s))
}

// reply answers a request on the subscription its reply subject falls under
// (nats.go subscribes to "<inbox prefix>.<id>.*" once and replies come there).
func (bc *brokerConn) reply(subject, payload string) {
	bc.mu.Lock()
	sid := ""
	for s, id := range bc.subs {
		if s == subject || strings.HasSuffix(s, ".*") && strings.HasPrefix(subject, strings.TrimSuffix(s, "*")) {
			sid = id
		}
	}
	bc.mu.Unlock()
	if sid != "" {
		bc.write(fmt.Sprintf("MSG %s %s %d\r\n%s\r\n", subject, sid, len(payload), payload))
	}
}

// deliver sends env on the declaration subject.
func (bc *brokerConn) deliver(env []byte) error {
	bc.mu.Lock()
	defer bc.mu.Unlock()
	msg := make([]byte, 0, len(env)+64)
	msg = fmt.Appendf(msg, "MSG %s %s %d\r\n", bc.declSubject, bc.decl, len(env))
	msg = append(msg, env...)
	msg = append(msg, "\r\n"...)
	_, err := bc.c.Write(msg)
	return err
}

// waitSubscribed returns the agent's connection once it subscribed to subject.
func (br *testBroker) waitSubscribed(b testing.TB, subject string) *brokerConn {
	b.Helper()
	bc := <-br.conns
	for range 1000 {
		bc.mu.Lock()
		bc.declSubject, bc.decl = subject, bc.subs[subject]
		bc.mu.Unlock()
		if bc.decl != "" {
			return bc
		}
		time.Sleep(time.Millisecond)
	}
	b.Fatalf("the agent did not subscribe to %s", subject)
	return nil
}

// waitReport waits for a status report of version applied, failing on one that
// names an error.
func (br *testBroker) waitReport(version uint64, timeout time.Duration) error {
	deadline := time.After(timeout)
	for {
		select {
		case st := <-br.reports:
			if st.Error != nil {
				return fmt.Errorf("the agent reports %s: %s", st.Error.Code, st.Error.Message)
			}
			if st.HaveApplied && st.AppliedVersion >= version {
				return nil
			}
		case <-deadline:
			return fmt.Errorf("no report of version %d", version)
		}
	}
}
