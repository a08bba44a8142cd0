package harness

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/bootstrap"
	"mesh/controlplane/daemon"
	"mesh/controlplane/datadir"
	"mesh/controlplane/operator"
	"mesh/controlplane/replication"
	"mesh/host/agent"
	"mesh/host/enrol"
	"mesh/tokenfmt"
)

// FastRaft keeps single-node elections short in tests.
func FastRaft() replication.Timeouts {
	return replication.Timeouts{Heartbeat: 300 * time.Millisecond, Election: 300 * time.Millisecond, LeaderLease: 150 * time.Millisecond, Commit: 20 * time.Millisecond}
}

// Options tune an in-process control plane.
type Options struct {
	// Now skews the control plane's clock; nil means time.Now.
	Now func() time.Time
	// Log receives the control plane's log; nil keeps it in memory (see Log).
	Log *slog.Logger
}

// Mesh is a control plane running inside the test process, bootstrapped in a temporary
// directory, with an operator client.
type Mesh struct {
	t      testing.TB
	Dir    datadir.Dir
	Listen string
	Daemon *daemon.Daemon
	Op     *operator.Client
	logBuf *syncBuffer
	opts   Options
	cancel context.CancelFunc
	done   chan struct{}
}

// StartMesh bootstraps and serves a one-node mesh in-process.
func StartMesh(t testing.TB, mesh string, o Options) *Mesh {
	t.Helper()
	m := BootstrapMesh(t, mesh, o)
	m.Start()
	t.Cleanup(m.Stop)
	return m
}

// BootstrapMesh bootstraps a one-node mesh in a temporary directory and does not start
// it (see Start).
func BootstrapMesh(t testing.TB, mesh string, o Options) *Mesh {
	t.Helper()
	ports := FreePorts(t, 3)
	m := &Mesh{t: t, Dir: datadir.Dir(filepath.Join(t.TempDir(), "cp")), Listen: fmt.Sprintf("127.0.0.1:%d", ports[0]), opts: o, logBuf: &syncBuffer{}}
	err := bootstrap.Run(bootstrap.Options{
		Mesh: mesh, Listen: m.Listen,
		RaftListen: fmt.Sprintf("127.0.0.1:%d", ports[1]), ClusterListen: fmt.Sprintf("127.0.0.1:%d", ports[2]),
		Dir: m.Dir, Now: o.Now,
	})
	if err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	return m
}

// Start (re)starts the daemon on the mesh's directory.
func (m *Mesh) Start() {
	m.t.Helper()
	log := m.opts.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(m.logBuf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	d, err := daemon.Open(context.Background(), daemon.Options{
		Dir: m.Dir, Logger: log, Timeouts: FastRaft(), ReconcileInterval: time.Second, Now: m.opts.Now,
	})
	if err != nil {
		m.t.Fatalf("open control plane: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.Daemon, m.cancel, m.done = d, cancel, make(chan struct{})
	go func() {
		_ = d.Run(ctx)
		close(m.done)
	}()
	op, err := operator.Dial(m.Dir, operator.Options{})
	if err != nil {
		m.t.Fatalf("operator: %v", err)
	}
	m.Op = op
}

// Stop stops the daemon (idempotent).
func (m *Mesh) Stop() {
	if m.cancel == nil {
		return
	}
	m.Op.Close()
	m.cancel()
	<-m.done
	m.Daemon.Close()
	m.cancel = nil
}

// Log is what the control plane logged so far (when Options.Log was nil).
func (m *Mesh) Log() string { return m.logBuf.String() }

// Token mints a token.
func (m *Mesh) Token(node string, ttl time.Duration) tokenfmt.Token {
	m.t.Helper()
	tok, err := m.Op.MintToken(node, tokenfmt.RoleWorker, ttl, nil)
	if err != nil {
		m.t.Fatalf("mint token for %s: %v", node, err)
	}
	return tok
}

// Declare declares body for node and returns the version assigned.
func (m *Mesh) Declare(node, body string) uint64 {
	m.t.Helper()
	var res api.DeclareResult
	if err := m.Op.Call(api.OpDeclare, api.DeclareRequest{Nodes: []string{node}, Body: []byte(body)}, &res); err != nil {
		m.t.Fatalf("declare for %s: %v", node, err)
	}
	return res.Assignments[0].Version
}

// Node returns one node's view.
func (m *Mesh) Node(id string) (api.NodeView, bool) {
	var res api.NodesResult
	if err := m.Op.Call(api.OpNodes, api.NodesRequest{Nodes: []string{id}}, &res); err != nil || len(res.Nodes) == 0 {
		return api.NodeView{}, false
	}
	return res.Nodes[0], true
}

// WaitApplied waits until node reports version applied.
func (m *Mesh) WaitApplied(node string, version uint64, limit time.Duration) {
	m.t.Helper()
	Eventually(m.t, limit, fmt.Sprintf("%s applies v%d", node, version), func() bool {
		n, ok := m.Node(node)
		return ok && n.Applied != nil && *n.Applied == version
	})
}

// Agent is a host agent running in-process.
type Agent struct {
	State, Root string
	Agent       *agent.Agent
	logBuf      *syncBuffer
	cancel      context.CancelFunc
	done        chan error
}

// EnrolHost enrols a host in a fresh state directory, in-process.
func EnrolHost(t testing.TB, token string, now func() time.Time) (state string, err error) {
	t.Helper()
	state = filepath.Join(t.TempDir(), "host")
	_, err = enrol.Enrol(context.Background(), enrol.Options{StateDir: state, Token: token, Now: now, DialTimeout: 5 * time.Second, RequestTimeout: 10 * time.Second})
	return state, err
}

// RunAgent starts an agent on an enrolled state directory.
func RunAgent(t testing.TB, state string, now func() time.Time) *Agent {
	t.Helper()
	return RunAgentWith(t, state, now, nil)
}

// RunAgentWith is RunAgent with the agent's options changed by set (nil: none),
// after the harness has set its own.
func RunAgentWith(t testing.TB, state string, now func() time.Time, set func(*agent.Options)) *Agent {
	t.Helper()
	a := &Agent{State: state, Root: filepath.Join(state, "managed"), logBuf: &syncBuffer{}, done: make(chan error, 1)}
	o := agent.Options{
		StateDir: state, Root: a.Root, Heartbeat: time.Second, Now: now,
		Logger: slog.New(slog.NewTextHandler(a.logBuf, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if set != nil {
		set(&o)
	}
	ag, err := agent.New(o)
	if err != nil {
		t.Fatalf("agent: %v", err)
	}
	a.Agent = ag
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	go func() { a.done <- ag.Run(ctx) }()
	t.Cleanup(a.Stop)
	return a
}

// Stop stops the agent and returns what Run returned.
func (a *Agent) Stop() {
	a.cancel()
	select {
	case err := <-a.done:
		a.done <- err
	case <-time.After(10 * time.Second):
	}
}

// Ended waits at most limit for the agent's Run to return by itself, and says
// whether it did and what it returned.
func (a *Agent) Ended(limit time.Duration) (ended bool, err error) {
	select {
	case err := <-a.done:
		a.done <- err // for Stop
		return true, err
	case <-time.After(limit):
		return false, nil
	}
}

// Log is what the agent logged.
func (a *Agent) Log() string { return a.logBuf.String() }

// AppliedVersions lists, in order, the versions the agent's log says it applied.
func AppliedVersions(log string) []string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, "declaration applied") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "version="); ok {
				out = append(out, v)
			}
		}
	}
	return out
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
