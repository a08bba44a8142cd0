package join

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/broker"
	"mesh/controlplane/api"
	"mesh/controlplane/datadir"
	"mesh/controlplane/pki"
	"mesh/tokenfmt"
)

// countingGrant admits every login to every subject and counts the logins.
type countingGrant struct{ logins *atomic.Int64 }

func (g countingGrant) Authenticate(c broker.Client) (broker.Grant, error) {
	g.logins.Add(1)
	all := []string{">"}
	return broker.Grant{User: "u" + c.Nkey, Account: broker.AccountOperators, Publish: all, Subscribe: all}, nil
}

// silentListener accepts connections and never answers: a control node whose
// machine drops packets past the TCP handshake (as a dial timeout sees it). It
// counts the connections.
func silentListener(t *testing.T, dialled *atomic.Int64) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dialled.Add(1)
			t.Cleanup(func() { c.Close() })
		}
	}()
	return ln.Addr().String()
}

// TestAJoinReachesTheMeshPastSilentBrokers: a join tried its token's brokers one
// after another, each given the dial's 10 s: two control nodes that drop packets
// (one lost, the reason another is added) kept it 20 s before the broker that
// answers. The next broker is now tried once one has gone unanswered for
// dialStagger: the mesh's answer (here a refusal for good, to keep the test
// short) comes within a few seconds, through one login only, and the silent
// brokers were dialled.
func TestAJoinReachesTheMeshPastSilentBrokers(t *testing.T) {
	now := time.Now()
	var logins atomic.Int64
	ca, _, err := pki.NewCA("m", now)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.IssueLeaf("control cp-1", []net.IP{net.IPv4(127, 0, 0, 1)}, now)
	if err != nil {
		t.Fatal(err)
	}
	srvTLS, err := pki.ServerConfig(leaf, ca.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := broker.Start(t.Context(), broker.Config{Name: "cp-1", Mesh: "m", Listen: "127.0.0.1:0", TLS: srvTLS, Auth: countingGrant{&logins}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)

	// The mesh's side: every join request answered token_unknown.
	nc, err := nats.Connect("tls://"+srv.Addr(), nats.SetCustomDialer(&broker.BoundDialer{TLS: pki.PinnedClientConfig(ca.Pin()), Timeout: 5 * time.Second}), nats.TLSHandshakeFirst())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	var asked atomic.Int64
	if _, err := nc.Subscribe(api.EnrolPrefix+">", func(m *nats.Msg) {
		asked.Add(1)
		data, _ := json.Marshal(api.EnrolResponse{V: api.ProtocolVersion, Error: &api.Error{Code: api.CodeTokenUnknown, Message: "this mesh never minted this token"}})
		_ = m.Respond(data)
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	logins.Store(0)

	var dialled atomic.Int64
	silent1, silent2 := silentListener(t, &dialled), silentListener(t, &dialled)
	tok := controlTokenFor(t, []string{silent1, silent2, srv.Addr()}, ca.Pin(), tokenfmt.RoleControl, now)
	d := datadir.Dir(t.TempDir() + "/cp-2")
	out := &steps{}
	start := time.Now()
	err = Join(t.Context(), Options{Dir: d, Token: tok, Out: out})
	took := time.Since(start)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "token_unknown") && !strings.Contains(err.Error(), "never minted") {
		t.Fatalf("err = %v, want the mesh's refusal\n%s", err, out)
	}
	// Two staggers and the answer; one after another it was two 10 s dial timeouts.
	if took > 8*time.Second {
		t.Errorf("the join took %s to reach the broker that answers (two silent ones before it)", took)
	}
	if n := logins.Load(); n != 1 || asked.Load() != 1 {
		t.Errorf("%d logins and %d requests reached the mesh, want one of each", n, asked.Load())
	}
	if n := dialled.Load(); n != 2 {
		t.Errorf("the silent brokers were dialled %d times, want once each", n)
	}
	if steps := out.String(); !strings.Contains(steps, srv.Addr()+": TLS handshake checked against the pinned CA") {
		t.Errorf("the steps do not name the broker that answered:\n%s", steps)
	}
}

// TestAJoinSaysItsBrokersFaultsInTheirOrder: attempts under way at once end in any
// order (here the token's first broker fails after its second), and the faults are
// said in the token's order, as when the brokers were tried one after another.
func TestAJoinSaysItsBrokersFaultsInTheirOrder(t *testing.T) {
	slow, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slow.Close() })
	go func() {
		for {
			c, err := slow.Accept()
			if err != nil {
				return
			}
			// Past the stagger, so that the second broker's attempt starts and
			// fails first.
			time.AfterFunc(dialStagger+time.Second, func() { c.Close() })
		}
	}()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := closed.Addr().String()
	closed.Close()
	now := time.Now()
	tok := controlTokenFor(t, []string{slow.Addr().String(), down}, [32]byte{1}, tokenfmt.RoleControl, now)
	out := &steps{}
	err = Join(t.Context(), Options{Dir: datadir.Dir(t.TempDir() + "/cp-2"), Token: tok, Out: out})
	msg := fmt.Sprint(err)
	first, second := strings.Index(msg, slow.Addr().String()+": "), strings.Index(msg, down+": ")
	if err == nil || first < 0 || second < 0 || first > second {
		t.Fatalf("err = %v, want both brokers' faults, the token's first one first\n%s", err, out)
	}
	if steps := out.String(); strings.Index(steps, down+": unreachable") < 0 || strings.Index(steps, down+": unreachable") > strings.Index(steps, slow.Addr().String()+": unreachable") {
		t.Errorf("the steps, said as the attempts end, should name the second broker first here:\n%s", steps)
	}
}
