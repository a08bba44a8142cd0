package join

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"mesh/broker"
	"mesh/controlplane/api"
	"mesh/controlplane/bootstrap"
	"mesh/controlplane/datadir"
	"mesh/controlplane/pki"
	"mesh/integration/freeport"
)

// fakeLeader is a control plane that answers a joiner's operator calls as a test
// says, over a real broker with the mesh CA: control.add with ProbeIndex,
// control.confirm and control.abort with the errors set (nil: done; abort
// unanswered when silentAbort), and it counts the aborts.
type fakeLeader struct {
	ProbeIndex  uint64
	Confirm     *api.Error
	Abort       *api.Error
	silentAbort bool

	mu     sync.Mutex
	aborts int
}

func (f *fakeLeader) abortsSeen() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.aborts
}

// grantAdmin admits every login to the operator API's subjects, both ways: the
// joiner's operator credentials and the fake leader answering them.
type grantAdmin struct{}

func (grantAdmin) Authenticate(c broker.Client) (broker.Grant, error) {
	all := []string{api.AdminPrefix + ">", "_INBOX.>"}
	return broker.Grant{User: "u" + c.Nkey, Account: broker.AccountOperators, Publish: all, Subscribe: all}, nil
}

// steps is a join's output, read while the join writes it.
type steps struct {
	mu  sync.Mutex
	out strings.Builder
}

func (s *steps) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.Write(p)
}

func (s *steps) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}

// joinAgainst returns a joiner of cp-2, admitted and its files saved (join step 3),
// whose control plane is f, the configuration its member step runs with, and its
// output.
func joinAgainst(t *testing.T, f *fakeLeader) (*run, datadir.Config, *steps) {
	t.Helper()
	now := time.Now()
	ca, _, err := pki.NewCA("m", now)
	if err != nil {
		t.Fatal(err)
	}
	loopback := []net.IP{net.IPv4(127, 0, 0, 1)}
	leaf1, err := ca.IssueLeaf("control cp-1", loopback, now)
	if err != nil {
		t.Fatal(err)
	}
	srvTLS, err := pki.ServerConfig(leaf1, ca.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := broker.Start(t.Context(), broker.Config{Name: "cp-1", Mesh: "m", Listen: "127.0.0.1:0", TLS: srvTLS, Auth: grantAdmin{}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)

	nk, _ := nkeys.CreateUser()
	pub, _ := nk.PublicKey()
	nc, err := nats.Connect("tls://"+srv.Addr(), nats.SetCustomDialer(&broker.BoundDialer{TLS: pki.PinnedClientConfig(ca.Pin()), Timeout: 5 * time.Second}),
		nats.TLSHandshakeFirst(), nats.Nkey(pub, nk.Sign))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	answer := func(m *nats.Msg, result any, e *api.Error) {
		resp := api.AdminResponse{V: api.ProtocolVersion, Error: e}
		if e == nil {
			resp.Result, _ = json.Marshal(result)
		}
		data, _ := json.Marshal(resp)
		_ = m.Respond(data)
	}
	for op, h := range map[string]nats.MsgHandler{
		api.OpControlAdd:     func(m *nats.Msg) { answer(m, api.ControlAddResult{ProbeIndex: f.ProbeIndex}, nil) },
		api.OpControlConfirm: func(m *nats.Msg) { answer(m, api.ControlConfirmResult{Voters: []string{"cp-1"}}, f.Confirm) },
		api.OpControlAbort: func(m *nats.Msg) {
			f.mu.Lock()
			f.aborts++
			f.mu.Unlock()
			if !f.silentAbort {
				answer(m, struct{}{}, f.Abort)
			}
		},
		api.OpNodes: func(m *nats.Msg) { answer(m, api.NodesResult{Mesh: "m"}, nil) },
	} {
		if _, err := nc.Subscribe(api.AdminSubject(op), h); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	d := datadir.Dir(t.TempDir())
	leaf2, err := ca.IssueLeaf("control cp-2", loopback, now)
	if err != nil {
		t.Fatal(err)
	}
	account, _ := nkeys.CreateAccount()
	creds, err := bootstrap.OperatorCreds(account, "cp-2")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{datadir.CACertFile: ca.CertPEM, datadir.TLSCertFile: leaf2.CertPEM, datadir.TLSKeyFile: leaf2.KeyPEM, datadir.AdminCredsFile: creds} {
		if err := datadir.WriteFile(d.Path(name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	addrs := freeport.Addrs(t, 3)
	pin := ca.Pin()
	cfg := datadir.Config{Format: datadir.ConfigFormat, Mesh: "m", Node: "cp-2", Listen: addrs[0], RaftListen: addrs[1], ClusterListen: addrs[2],
		Brokers: []string{srv.Addr()}, CAPin: hexOf(pin[:]), Joining: true, Joined: true}
	save(t, d, cfg)
	out := &steps{}
	return &run{o: Options{Dir: d, Out: out, Logger: slog.New(slog.DiscardHandler), Now: time.Now, ConfirmTimeout: 45 * time.Second}}, cfg, out
}

// TestAConfirmationTheMeshCouldNotAnswerIsNotRolledBack: a joiner that applied its
// probe entry and asked the mesh to confirm it, while the leader changed or failed
// to answer (`unavailable`, "leadership changed during the request"; `internal`),
// was rolled back and told "could not be confirmed" (ErrNotConfirmed), pointing at
// replication or a firewall: a healthy join undone, to be run again while the token
// lasts. Now nothing is rolled back; the join says the node replicates and is a
// nonvoter, and that the same join run again resumes (ErrConfirmLater, exit 3).
func TestAConfirmationTheMeshCouldNotAnswerIsNotRolledBack(t *testing.T) {
	for _, refusal := range []*api.Error{
		{Code: api.CodeUnavailable, Message: "leadership changed during the request; run it again"},
		{Code: api.CodeInternal, Message: "raft: shutdown"},
	} {
		t.Run(refusal.Code, func(t *testing.T) {
			f := &fakeLeader{Confirm: refusal}
			r, cfg, _ := joinAgainst(t, f)
			err := r.member(t.Context(), cfg, &api.ControlAdmission{})
			if n := f.abortsSeen(); n != 0 {
				t.Errorf("the join was rolled back (%d control.abort) after the mesh could not answer its confirmation: %v", n, err)
			}
			var ae *api.Error
			if !errors.Is(err, ErrConfirmLater) || errors.Is(err, ErrNotConfirmed) || !errors.As(err, &ae) || ae.Code != refusal.Code {
				t.Fatalf("want ErrConfirmLater wrapping the mesh's %s, not ErrNotConfirmed; got %v", refusal.Code, err)
			}
			for _, says := range []string{"nothing was rolled back", "run the same meshctl join --data " + string(r.o.Dir) + " again with the same token"} {
				if !strings.Contains(err.Error(), says) {
					t.Errorf("the error does not say %q: %v", says, err)
				}
			}
		})
	}
}

// TestAJoinSaysWhetherItWasRolledBack: a join that cannot go on asks the mesh to
// take the node out of Raft again (control.abort). Before, the answer was ignored,
// and the join said "the join was rolled back" (or "could not be confirmed and was
// rolled back") even when the call failed or outlived the 1.5 s an interrupted join
// gives it: an operator believed a nonvoter gone that Raft still held. Now a
// rollback that went through says so, and one that did not says so
// (ErrRollbackFailed) with both ways out: the same join run again, or meshctl
// control remove.
func TestAJoinSaysWhetherItWasRolledBack(t *testing.T) {
	notReplicating := &api.Error{Code: api.CodeBadRequest, Message: "cp-2 has not applied its probe entry: it is not replicating the log"}
	abortRefused := &api.Error{Code: api.CodeUnavailable, Message: "raft: leadership lost while committing log"}
	for name, c := range map[string]struct {
		f         *fakeLeader
		interrupt bool
		timeout   time.Duration
		undone    bool
		says      string
	}{
		"confirmation refused, rolled back":      {f: &fakeLeader{Confirm: notReplicating}, undone: true, says: "not replicating the log"},
		"confirmation refused, rollback refused": {f: &fakeLeader{Confirm: notReplicating, Abort: abortRefused}, says: abortRefused.Message},
		"probe not applied, rolled back":         {f: &fakeLeader{ProbeIndex: 1 << 40}, timeout: 300 * time.Millisecond, undone: true, says: "the leader cannot reach"},
		"probe not applied, rollback refused":    {f: &fakeLeader{ProbeIndex: 1 << 40, Abort: abortRefused}, timeout: 300 * time.Millisecond, says: abortRefused.Message},
		"interrupted, rolled back":               {f: &fakeLeader{ProbeIndex: 1 << 40}, interrupt: true, undone: true, says: "interrupted by SIGTERM while waiting for this node to replicate"},
		"interrupted, rollback unanswered":       {f: &fakeLeader{ProbeIndex: 1 << 40, silentAbort: true}, interrupt: true, says: "rolling the join back failed (no answer within " + abortWait.String()},
	} {
		t.Run(name, func(t *testing.T) {
			r, cfg, out := joinAgainst(t, c.f)
			if c.timeout > 0 {
				r.o.ConfirmTimeout = c.timeout
			}
			ctx, cancel := context.WithCancelCause(t.Context())
			defer cancel(nil)
			if c.interrupt {
				// Stopped while it waits for the probe entry, a nonvoter.
				go func() {
					for !strings.Contains(out.String(), "added as a nonvoter") {
						time.Sleep(10 * time.Millisecond)
					}
					cancel(errors.New("interrupted by SIGTERM"))
				}()
			}
			err := r.member(ctx, cfg, &api.ControlAdmission{})
			if err == nil {
				t.Fatal("the join succeeded")
			}
			if n := c.f.abortsSeen(); n != 1 {
				t.Fatalf("%d control.abort calls, want 1: %v", n, err)
			}
			msg := err.Error()
			if !strings.Contains(msg, c.says) {
				t.Errorf("the error does not say %q: %v", c.says, err)
			}
			if !c.interrupt && !errors.Is(err, ErrNotConfirmed) {
				t.Errorf("want ErrNotConfirmed, got %v", err)
			}
			if c.undone {
				if errors.Is(err, ErrRollbackFailed) || !strings.Contains(msg, "rolled back") {
					t.Errorf("a rollback that went through is not said so: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrRollbackFailed) {
				t.Errorf("want ErrRollbackFailed, got %v", err)
			}
			if strings.Contains(msg, "was rolled back") {
				t.Errorf("the join says it was rolled back, and it was not: %v", err)
			}
			for _, says := range []string{"may still be a member of Raft", "run the same meshctl join --data " + string(r.o.Dir) + " again with the same token", "meshctl control remove cp-2"} {
				if !strings.Contains(msg, says) {
					t.Errorf("the error does not say %q: %v", says, err)
				}
			}
		})
	}
}
