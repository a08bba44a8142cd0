package daemon

import (
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"mesh/broker"
	"mesh/controlplane/api"
	"mesh/controlplane/authn"
	"mesh/controlplane/bootstrap"
	"mesh/controlplane/datadir"
	"mesh/controlplane/state"
	"mesh/integration/freeport"
)

// fleet is a control plane with n enrolled nodes, seeded through the log.
func fleet(b testing.TB, n int) *Daemon {
	b.Helper()
	return fleetLogging(b, n, slog.New(slog.DiscardHandler))
}

// fleetLogging is fleet logging to log.
func fleetLogging(b testing.TB, n int, log *slog.Logger) *Daemon {
	b.Helper()
	dir := bootstrapped(b, "bench")
	d, err := Open(context.Background(), Options{Dir: dir, Logger: log, wrapAuth: withObserver,
		Timeouts: testTimeouts})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(d.Close)
	// Concurrent proposals: Raft batches them into few fsyncs.
	var wg sync.WaitGroup
	sem := make(chan struct{}, 256)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			node := fmt.Sprintf("n-%d", i)
			kp, _ := nkeys.CreateUser()
			pub, _ := kp.PublicKey()
			id := hex.EncodeToString([]byte(fmt.Sprintf("%032d", i)))
			for _, c := range []state.Command{
				{Op: state.OpCreateToken, CreateToken: &state.CreateTokenCmd{ID: id, Node: node, Role: state.RoleWorker, TTL: time.Hour}},
				{Op: state.OpEnrol, Enrol: &state.EnrolCmd{TokenID: id, Node: node, Role: state.RoleWorker, PublicKey: pub}},
			} {
				if res, err := d.raft.Apply(c, time.Minute); err != nil || res.Err != nil {
					b.Errorf("seed %s: %v %v", node, err, res.Err)
					return
				}
			}
		}(i)
	}
	wg.Wait()
	return d
}

// observerToken admits, in the package's tests only, a connection in the hosts
// account that hears every node's declarations and every reply: what n hosts
// together would receive.
const observerToken = "test-observer"

// operatorToken admits, in the package's tests only, an operator without
// credentials: the operators account and an operator's grant.
const operatorToken = "test-operator"

type observing struct{ broker.Authenticator }

func (o observing) Authenticate(c broker.Client) (broker.Grant, error) {
	switch c.Token {
	case observerToken:
		return broker.Grant{User: "test-observer", Account: broker.AccountHosts, Subscribe: []string{"mesh.node.*.decl", "_INBOX.>", "mesh.enrol.>"}}, nil
	case operatorToken:
		return authn.OperatorGrant("test"), nil
	}
	return o.Authenticator.Authenticate(c)
}

func withObserver(a broker.Authenticator) broker.Authenticator { return observing{a} }

// counter counts messages on every node's declaration subject, as n hosts would
// receive them, over its own connection to the broker.
func counter(b testing.TB, d *Daemon) (*atomic.Int64, *nats.Conn) {
	b.Helper()
	nc, err := nats.Connect("", nats.InProcessServer(d.broker.InProcess()), nats.Token(observerToken))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	var got atomic.Int64
	sub, err := nc.Subscribe("mesh.node.*.decl", func(*nats.Msg) { got.Add(1) })
	if err != nil {
		b.Fatal(err)
	}
	sub.SetPendingLimits(-1, -1)
	nc.Flush()
	return &got, nc
}

func waitCount(b *testing.B, got *atomic.Int64, want int64) {
	deadline := time.Now().Add(2 * time.Minute)
	for got.Load() < want {
		if time.Now().After(deadline) {
			b.Fatalf("received %d of %d", got.Load(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkDeclareFanout measures one declaration for a whole fleet (commit one log
// entry, sign one envelope per node, or one batch for them all, publish, received
// by a subscriber), beside the baseline in the same run: the same envelopes
// published raw, without committing or signing. Run with:
// go test -run='^$' -bench=DeclareFanout -benchtime=5x ./controlplane/daemon/
func BenchmarkDeclareFanout(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		d := fleet(b, n)
		got, _ := counter(b, d)
		body := []byte(`{"files":[{"path":"etc/app.conf","content":"listen 8080\n","mode":"0640"}]}`)
		declare := func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				start := got.Load()
				res, err := d.declare(api.DeclareRequest{All: true, Body: body}, requestCall{})
				if err != nil || len(res.Assignments) != n {
					b.Fatalf("declare: %v (%d assignments)", err, len(res.Assignments))
				}
				waitCount(b, got, start+int64(n))
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/node")
		}
		b.Run(fmt.Sprintf("nodes=%d/declare", n), declare)
		// The same, the nodes' agents taking batch proofs (decision 0034): one
		// signature for the fleet.
		var ids []string
		d.fsm.Read(func(s *state.State) {
			for id := range s.Nodes {
				ids = append(ids, id)
			}
		})
		takeBatches(b, d, ids)
		b.Run(fmt.Sprintf("nodes=%d/declare-batch", n), declare)
		// The baseline: the same number of envelopes of the same size, already
		// signed, published to the same subjects.
		var envs [][]byte
		var subjects []string
		for _, in := range d.fsm.DeclarationInputs(ids) {
			env, _ := d.signer.declaration(in)
			envs, subjects = append(envs, env), append(subjects, api.DeclarationSubject(in.Node))
		}
		b.Run(fmt.Sprintf("nodes=%d/baseline-raw-nats", n), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				start := got.Load()
				for i := range envs {
					d.conns.publisher.Publish(subjects[i], envs[i])
				}
				d.conns.publisher.Flush()
				waitCount(b, got, start+int64(n))
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/node")
		})
		d.Close()
	}
}

// bootstrapped bootstraps a control node of mesh in a new data directory, on three
// free loopback ports (freeport.Addrs).
func bootstrapped(t testing.TB, mesh string) datadir.Dir {
	t.Helper()
	addrs := freeport.Addrs(t, 3)
	dir := datadir.Dir(filepath.Join(t.TempDir(), "cp"))
	if err := bootstrap.Run(bootstrap.Options{Mesh: mesh, Dir: dir,
		Listen: addrs[0], RaftListen: addrs[1], ClusterListen: addrs[2]}); err != nil {
		t.Fatal(err)
	}
	return dir
}
