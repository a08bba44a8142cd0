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
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
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
//	go test -run='^$' -bench=Declaration -cpu 1,2 ./host/agent/
//
// -cpu 1 is how `meshhost run` runs (GOMAXPROCS=1 unless set); -cpu 2 shows what a
// second core costs the agent.
//
// µs/op is wall time per declaration, round trip included; cpu-µs/op is the
// agent process's CPU (user and system, every goroutine: the agent's, nats.go's, the
// garbage collector's; the broker is another process) per declaration, which is what
// the fleet's "agents µs per host" counts. ed25519.Verify is the baseline: the bare
// verification of the same signed bytes, in the same run.
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

	broker := startBrokerProcess(b, f, envs, 2)
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
	broker.expect(b, "ready")
	size := len(envs[0])
	envs = nil

	b.ResetTimer()
	cpu := startCPU()
	broker.say(b, "go")
	broker.expect(b, "done")
	b.StopTimer()
	reportPerDecl(b, cpu, size)
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

// The test broker runs in a process of its own, the test binary started again, so
// that the CPU the benchmark counts is the agent's alone, as in the fleet benchmark
// where the agents and the broker are separate processes. It speaks just enough of
// the NATS protocol, over TLS with the handshake first and a certificate of the
// fixture's CA, for the agent to connect as its node, subscribe, sync and report: it
// answers CONNECT and PING, acknowledges a sync as "nothing to send", and, once told
// to go, delivers each envelope and waits for the status report of its version
// before it sends the next.
//
// The two processes speak in lines: the broker prints "addr <ip:port>", then "ready"
// once the agent subscribed to its declarations; the benchmark writes "go"; the
// broker prints "done" after the last report (or "fail <reason>"), and exits when
// its standard input closes.

const brokerEnv = "MESHHOST_BENCH_BROKER"

// brokerJob is what the benchmark hands the broker process, as JSON.
type brokerJob struct {
	CA, CAKey []byte // DER
	Subjects  identitySubjects
	Envs      [][]byte
	First     uint64 // the version of Envs[0]; each next one is one more
	// Now is the agent's clock (t0): the broker's certificate is valid then, as
	// the agent's pin check asks by that clock.
	Now time.Time
}

type identitySubjects struct{ Declarations, Status, Sync string }

type brokerProcess struct {
	addr string
	in   io.WriteCloser
	out  *bufio.Scanner
}

func startBrokerProcess(b testing.TB, f *fixture, envs [][]byte, first uint64) *brokerProcess {
	b.Helper()
	caKey, err := x509.MarshalPKCS8PrivateKey(f.caKey)
	if err != nil {
		b.Fatal(err)
	}
	job, err := json.Marshal(brokerJob{CA: f.ca.Raw, CAKey: caKey, Envs: envs, First: first, Now: f.a.o.Now(),
		Subjects: identitySubjects{f.a.id.Subjects.Declarations, f.a.id.Subjects.Status, f.a.id.Subjects.Sync}})
	if err != nil {
		b.Fatal(err)
	}
	jobFile := filepath.Join(b.TempDir(), "job.json")
	if err := os.WriteFile(jobFile, job, 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestBenchBroker$", "-test.count=1")
	cmd.Env = append(os.Environ(), brokerEnv+"="+jobFile)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { in.Close(); cmd.Wait() })
	bp := &brokerProcess{in: in, out: bufio.NewScanner(out)}
	bp.addr = bp.expect(b, "addr")
	return bp
}

// expect reads the broker's lines up to the one that starts with word and returns
// the rest of it.
func (bp *brokerProcess) expect(b testing.TB, word string) string {
	b.Helper()
	for bp.out.Scan() {
		w, rest, _ := strings.Cut(bp.out.Text(), " ")
		switch w {
		case word:
			return rest
		case "fail":
			b.Fatalf("test broker: %s", rest)
		}
	}
	b.Fatalf("test broker ended before %q: %v", word, bp.out.Err())
	return ""
}

func (bp *brokerProcess) say(b testing.TB, line string) {
	if _, err := io.WriteString(bp.in, line+"\n"); err != nil {
		b.Fatal(err)
	}
}

// TestBenchBroker is BenchmarkDeclaration's broker process; run on its own it
// does nothing.
func TestBenchBroker(t *testing.T) {
	path := os.Getenv(brokerEnv)
	if path == "" {
		t.Skip("the broker process of BenchmarkDeclaration")
	}
	if err := runBroker(path); err != nil {
		fmt.Printf("fail %v\n", err)
	}
	io.Copy(io.Discard, os.Stdin)
}

func runBroker(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var job brokerJob
	if err := json.Unmarshal(raw, &job); err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(job.CA)
	if err != nil {
		return err
	}
	caKey, err := x509.ParsePKCS8PrivateKey(job.CAKey)
	if err != nil {
		return err
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "test broker"},
		NotBefore: job.Now.Add(-time.Hour), NotAfter: job.Now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{MinVersion: tls.VersionTLS13,
		Certificates: []tls.Certificate{{Certificate: [][]byte{der, ca.Raw}, PrivateKey: key}}})
	if err != nil {
		return err
	}
	defer ln.Close()
	fmt.Printf("addr %s\n", ln.Addr())
	c, err := ln.Accept()
	if err != nil {
		return err
	}
	bc := &brokerConn{c: c, job: &job, subs: map[string]string{}, subscribed: make(chan string, 1), reports: make(chan uint64, 64)}
	go bc.serve()
	var sid string
	select {
	case sid = <-bc.subscribed:
	case <-time.After(10 * time.Second):
		return errors.New("the agent did not subscribe to its declarations")
	}
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() || in.Text() != "go" {
		return errors.New("not told to go")
	}
	for i, env := range job.Envs {
		version := job.First + uint64(i)
		msg := fmt.Appendf(nil, "MSG %s %s %d\r\n", job.Subjects.Declarations, sid, len(env))
		msg = append(append(msg, env...), "\r\n"...)
		if err := bc.write(msg); err != nil {
			return err
		}
		if err := bc.waitReport(version); err != nil {
			return err
		}
	}
	fmt.Println("done")
	return nil
}

type brokerConn struct {
	c          net.Conn
	job        *brokerJob
	mu         sync.Mutex // one writer at a time: the reader's answers, the deliveries
	subs       map[string]string
	subscribed chan string // the sid of the declarations' subscription
	reports    chan uint64 // applied versions the status reports name; 0 for an error
}

func (bc *brokerConn) serve() {
	defer bc.c.Close()
	bc.write(fmt.Appendf(nil, "INFO %s\r\n", `{"server_id":"test","version":"2.11.0","proto":1,"headers":true,"max_payload":1048576,"tls_required":true,"nonce":"bm9uY2U"}`))
	r := bufio.NewReader(bc.c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		op, args, _ := strings.Cut(strings.TrimRight(line, "\r\n"), " ")
		f := strings.Fields(args)
		switch strings.ToUpper(op) {
		case "PING":
			bc.write([]byte("PONG\r\n"))
		case "SUB": // SUB <subject> [queue] <sid>
			bc.subs[f[0]] = f[len(f)-1]
			if f[0] == bc.job.Subjects.Declarations {
				bc.subscribed <- f[len(f)-1]
			}
		case "PUB", "HPUB": // PUB <subject> [reply] <size>; HPUB <subject> [reply] <header size> <size>
			n, err := strconv.Atoi(f[len(f)-1])
			if err != nil {
				return
			}
			payload := make([]byte, n+2)
			if _, err := io.ReadFull(r, payload); err != nil {
				return
			}
			if strings.EqualFold(op, "HPUB") {
				// The headers (a sync's Mesh-Sync tag) come first; the answer
				// carries none, as an older control plane's does.
				h, err := strconv.Atoi(f[len(f)-2])
				if err != nil || h > n {
					return
				}
				payload, n, f = payload[h:], n-h, f[:len(f)-1]
			}
			switch {
			case f[0] == bc.job.Subjects.Status:
				var st wire.Status
				if json.Unmarshal(payload[:n], &st) == nil {
					if st.Error != nil || !st.HaveApplied {
						st.AppliedVersion = 0
					}
					bc.reports <- st.AppliedVersion
				}
			case f[0] == bc.job.Subjects.Sync && len(f) == 3:
				bc.reply(f[1], fmt.Sprintf(`{"v":%d,"sent":0}`, wire.ProtocolVersion))
			}
		}
	}
}

func (bc *brokerConn) write(msg []byte) error {
	bc.mu.Lock()
	defer bc.mu.Unlock()
	_, err := bc.c.Write(msg)
	return err
}

// reply answers a request on the subscription its reply subject falls under
// (nats.go subscribes to "<inbox prefix>.<id>.*" once, and replies come there).
func (bc *brokerConn) reply(subject, payload string) {
	for s, sid := range bc.subs {
		if s == subject || strings.HasSuffix(s, ".*") && strings.HasPrefix(subject, strings.TrimSuffix(s, "*")) {
			bc.write(fmt.Appendf(nil, "MSG %s %s %d\r\n%s\r\n", subject, sid, len(payload), payload))
			return
		}
	}
}

// waitReport waits for a status report of version, failing on one that names an
// error.
func (bc *brokerConn) waitReport(version uint64) error {
	deadline := time.After(10 * time.Second)
	for {
		select {
		case v := <-bc.reports:
			switch {
			case v == 0:
				return fmt.Errorf("the agent reports an error instead of version %d", version)
			case v >= version:
				return nil
			}
		case <-deadline:
			return fmt.Errorf("no report of version %d", version)
		}
	}
}

// TestTheDeclarationBenchmarkRuns runs BenchmarkDeclaration's measured path once, so
// that go test notices when the agent outgrows the benchmark's broker: it had
// stopped connecting (the broker's certificate was valid by the machine's clock, not
// the agent's, once the pin check asked by the agent's; and it ignored HPUB, which a
// tagged sync is) and nobody ran the benchmark to see it.
func TestTheDeclarationBenchmarkRuns(t *testing.T) {
	dir, err := os.MkdirTemp("", "meshhost-bench-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ran, failed := false, false
	testing.Benchmark(func(b *testing.B) {
		if ran {
			b.SkipNow() // once (b.N is 1 then) is enough to know it runs
		}
		ran = true
		defer func() { failed = b.Failed() }()
		benchRun(b, dir)
	})
	if !ran || failed {
		t.Fatal("BenchmarkDeclaration's run failed: go test -run '^$' -bench BenchmarkDeclaration ./host/agent/ says why")
	}
}
