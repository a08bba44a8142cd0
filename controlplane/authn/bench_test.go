package authn

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"mesh/broker"
	"mesh/controlplane/pki"
	"mesh/controlplane/state"
)

type allowAll struct{}

func (allowAll) Authenticate(broker.Client) (broker.Grant, error) {
	return broker.Grant{User: "anyone", Account: broker.AccountHosts, Publish: []string{">"}, Subscribe: []string{">"}}, nil
}

// BenchmarkNodeConnect measures what a host's connection costs the broker: TLS 1.3
// handshake first, CONNECT with the node's nkey and nonce signature, the hook looking
// the key up in a roster of 10,000 nodes and verifying the signature, the grant
// registered. The baseline in the same run connects the same clients through the same
// TLS broker with a hook that allows everyone without a check, so the difference is
// the authentication. Run with:
// go test -run='^$' -bench=NodeConnect ./controlplane/authn/
func BenchmarkNodeConnect(b *testing.B) {
	fx := newFixture(b)
	const fleet = 10000
	keys := make([]nkeys.KeyPair, fleet)
	at := now0.Add(-time.Hour)
	for i := range fleet {
		keys[i] = mustKey(b, nkeys.CreateUser)
		pub, _ := keys[i].PublicKey()
		id := fmt.Sprintf("bench-%d", i)
		fx.apply(b, state.Command{Op: state.OpCreateToken, At: at, CreateToken: &state.CreateTokenCmd{ID: id, Node: id, Role: state.RoleWorker, TTL: time.Hour}})
		fx.apply(b, state.Command{Op: state.OpEnrol, At: at, Enrol: &state.EnrolCmd{TokenID: id, Node: id, Role: state.RoleWorker, PublicKey: pub}})
	}
	ca, _, err := pki.NewCA("bench", time.Now())
	if err != nil {
		b.Fatal(err)
	}
	leaf, _ := ca.IssueLeaf("bench", []net.IP{net.IPv4(127, 0, 0, 1)}, time.Now())
	serverTLS, _ := pki.ServerConfig(leaf, ca.CertPEM)
	auth := New(Config{Roster: fx.fsm, Logger: slog.New(slog.DiscardHandler)})
	for _, tc := range []struct {
		name  string
		auth  broker.Authenticator
		bound bool
	}{{"roster-nkey", auth, false}, {"roster-nkey-bound", auth, true}, {"baseline-allow-all", allowAll{}, false}} {
		srv, err := broker.Start(context.Background(), broker.Config{Name: "bench", Mesh: "bench", Listen: "127.0.0.1:0", TLS: serverTLS, Auth: tc.auth, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := range b.N {
				kp := keys[i%fleet]
				pub, _ := kp.PublicKey()
				opts := []nats.Option{nats.Secure(pki.PinnedClientConfig(ca.Pin())), nats.TLSHandshakeFirst(), nats.Nkey(pub, kp.Sign), nats.NoReconnect()}
				if tc.bound {
					// As this version's clients log in: the nonce bound to the session.
					d := &broker.BoundDialer{TLS: pki.PinnedClientConfig(ca.Pin())}
					opts = []nats.Option{nats.SetCustomDialer(d), nats.TLSHandshakeFirst(), nats.Nkey(pub, d.Sign(kp.Sign)), nats.NoReconnect()}
				}
				nc, err := nats.Connect("tls://"+srv.Addr(), opts...)
				if err != nil {
					b.Fatal(err)
				}
				nc.Close()
			}
		})
		srv.Shutdown()
	}
}

// BenchmarkEnrollingCheck measures the hook's check of an enrolling client, in
// process: an older client's sent secret (hashed and looked up) beside this
// version's proof (looked up, then the proof verified), both with the nonce
// signature bound to the session. The proof costs one Ed25519 verification more.
// Run with:
// go test -run='^$' -bench=EnrollingCheck ./controlplane/authn/
func BenchmarkEnrollingCheck(b *testing.B) {
	fx := newFixture(b)
	a := New(Config{Roster: fx.fsm, Mesh: "demo", Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return fx.clock },
		TokenConnections: 1 << 30})
	kp := mustKey(b, nkeys.CreateUser)
	session := binding(0)
	for _, tc := range []struct {
		name string
		mk   func(nonce []byte) broker.Client
	}{
		{"secret-sent", func(nonce []byte) broker.Client {
			c := enrolling(b, "web-2", fx.secret, kp, nonce)
			c.Binding, c.Sig = session, sign(b, kp, broker.BoundNonce(nonce, session))
			return c
		}},
		{"proof", func(nonce []byte) broker.Client { return proving(b, "web-2", fx.secret, kp, nonce, session) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			clients := make([]broker.Client, 256)
			for i := range clients {
				clients[i] = tc.mk([]byte(fmt.Sprintf("nonce-%d", i)))
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if _, err := a.Authenticate(clients[i%len(clients)]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkIdleConnectionMemory reports the broker's heap per idle node connection:
// 1,000 nodes connect from a separate process (this test binary, re-run as a helper)
// and subscribe to their declarations, so only the broker's side is in this heap. The
// roster hook's per-node grants are measured beside the allow-all hook in the same
// run. Run with:
// go test -run='^$' -bench=IdleConnectionMemory -benchtime=1x ./controlplane/authn/
func BenchmarkIdleConnectionMemory(b *testing.B) {
	fx := newFixture(b)
	const conns = 1000
	seeds := make([]string, conns)
	at := now0.Add(-time.Hour)
	for i := range conns {
		kp := mustKey(b, nkeys.CreateUser)
		pub, _ := kp.PublicKey()
		seed, _ := kp.Seed()
		seeds[i] = string(seed)
		id := fmt.Sprintf("idle-%d", i)
		fx.apply(b, state.Command{Op: state.OpCreateToken, At: at, CreateToken: &state.CreateTokenCmd{ID: id, Node: id, Role: state.RoleWorker, TTL: time.Hour}})
		fx.apply(b, state.Command{Op: state.OpEnrol, At: at, Enrol: &state.EnrolCmd{TokenID: id, Node: id, Role: state.RoleWorker, PublicKey: pub}})
	}
	ca, _, _ := pki.NewCA("bench", time.Now())
	leaf, _ := ca.IssueLeaf("bench", []net.IP{net.IPv4(127, 0, 0, 1)}, time.Now())
	serverTLS, _ := pki.ServerConfig(leaf, ca.CertPEM)
	pin := ca.Pin()
	seedFile := filepath.Join(b.TempDir(), "seeds.json")
	data, _ := json.Marshal(map[string]any{"seeds": seeds, "pin": hex.EncodeToString(pin[:])})
	if err := os.WriteFile(seedFile, data, 0o600); err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		auth broker.Authenticator
	}{{"roster-nkey", New(Config{Roster: fx.fsm, Logger: slog.New(slog.DiscardHandler)})}, {"baseline-allow-all", allowAll{}}} {
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				srv, err := broker.Start(context.Background(), broker.Config{Name: "bench", Mesh: "bench", Listen: "127.0.0.1:0", TLS: serverTLS, Auth: tc.auth, Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					b.Fatal(err)
				}
				before := heapInUse()
				cmd := exec.Command(os.Args[0], "-test.run=^TestIdleClientsHelper$")
				cmd.Env = append(os.Environ(), "MESH_IDLE_CLIENTS="+srv.Addr()+","+seedFile)
				stdin, _ := cmd.StdinPipe()
				out, _ := cmd.StdoutPipe()
				if err := cmd.Start(); err != nil {
					b.Fatal(err)
				}
				line, _ := bufio.NewReader(out).ReadString('\n')
				if !strings.HasPrefix(line, "ready") {
					b.Fatalf("helper: %q", line)
				}
				if n, _ := srv.Connections(); len(n) != conns {
					b.Fatalf("%d connections, want %d", len(n), conns)
				}
				b.ReportMetric(float64(heapInUse()-before)/conns/1024, "KiB/conn")
				stdin.Close()
				cmd.Wait()
				srv.Shutdown()
			}
		})
	}
}

// TestIdleClientsHelper is the helper process of BenchmarkIdleConnectionMemory: it
// does nothing unless that benchmark runs it.
func TestIdleClientsHelper(t *testing.T) {
	arg := os.Getenv("MESH_IDLE_CLIENTS")
	if arg == "" {
		t.Skip("helper process for BenchmarkIdleConnectionMemory; it runs only when that benchmark starts it")
	}
	addr, file, _ := strings.Cut(arg, ",")
	var in struct {
		Seeds []string `json:"seeds"`
		Pin   string   `json:"pin"`
	}
	data, _ := os.ReadFile(file)
	if err := json.Unmarshal(data, &in); err != nil {
		t.Fatal(err)
	}
	var pin [32]byte
	b, _ := hex.DecodeString(in.Pin)
	copy(pin[:], b)
	var open []*nats.Conn
	for i, seed := range in.Seeds {
		kp, _ := nkeys.FromSeed([]byte(seed))
		pub, _ := kp.PublicKey()
		nc, err := nats.Connect("tls://"+addr, nats.Secure(pki.PinnedClientConfig(pin)), nats.TLSHandshakeFirst(), nats.Nkey(pub, kp.Sign), nats.NoReconnect())
		if err != nil {
			t.Fatal(err)
		}
		nc.SubscribeSync(fmt.Sprintf("mesh.node.idle-%d.decl", i))
		open = append(open, nc)
	}
	for _, nc := range open {
		nc.Flush()
	}
	fmt.Println("ready")
	io.ReadAll(os.Stdin)
}

func heapInUse() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}
