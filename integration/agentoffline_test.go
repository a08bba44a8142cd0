package integration

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"mesh/host/agent"
	"mesh/host/hooks"
	"mesh/integration/harness"
)

// offlineAgent is an agent run in-process, as meshhost run runs it (its socket,
// hooks), against the in-process control plane.
type offlineAgent struct {
	a    *agent.Agent
	log  *lockedBuffer
	stop func() error
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func startOfflineAgent(t *testing.T, state string, hk hooks.Config) *offlineAgent {
	t.Helper()
	buf := &lockedBuffer{}
	a, err := agent.New(agent.Options{
		StateDir: state, Root: filepath.Join(state, "managed"), Heartbeat: time.Second, Hooks: hk,
		Socket: agent.SocketPath(state),
		Logger: slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	o := &offlineAgent{a: a, log: buf}
	var once sync.Once
	var runErr error
	o.stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(15 * time.Second):
				t.Errorf("the agent did not stop within 15s of being asked:\n%s", buf)
			}
		})
		return runErr
	}
	t.Cleanup(func() { o.stop() })
	return o
}

// failingHook is a hooks file whose one hook, for etc/*, fails until the file it
// returns exists; runs counts its runs.
func failingHook(t *testing.T) (hk hooks.Config, fixed string, runs func() int) {
	t.Helper()
	dir := t.TempDir()
	fixed, count := filepath.Join(dir, "fixed"), filepath.Join(dir, "runs")
	p := filepath.Join(dir, "hooks.json")
	writeFile(t, p, `{"hooks":[{"name":"restart-app","paths":["etc/*"],"run":["sh","-c",`+
		`"echo run >> `+count+`; test -e `+fixed+` || { echo 'app.service: port 8080 in use' >&2; exit 1; }"]}]}`)
	hk, err := hooks.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	return hk, fixed, func() int {
		b, _ := os.ReadFile(count)
		return strings.Count(string(b), "run")
	}
}

// TestHookRetryWhileTheMeshIsDown: a host whose hook failed is restarted and fixed
// by hand while the control plane is down. The agent runs the owed hook as it
// starts, and answers meshhost hooks retry, without the mesh; the retry and
// meshhost status say the mesh cannot be reached and the outcome is reported once
// it is; the control plane, back, hears that the hook succeeded. Before, the agent
// did neither until its first connection: the retry failed as "a version from
// before hooks retry?", and the owed hooks waited for the mesh.
func TestHookRetryWhileTheMeshIsDown(t *testing.T) {
	m := harness.StartMesh(t, "offline", harness.Options{})
	state, err := harness.EnrolHost(t, m.Token("web-1", 10*time.Minute).Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	hk, fixed, runs := failingHook(t)
	first := startOfflineAgent(t, state, hk)
	m.Declare("web-1", `{"files":[{"path":"etc/app.conf","content":"port = 8080\n"}]}`)
	nodeError := func() string {
		n, ok := m.Node("web-1")
		if !ok || n.LastError == nil {
			return ""
		}
		return n.LastError.Code
	}
	harness.Eventually(t, 20*time.Second, "the control plane hears of the failed hook", func() bool { return nodeError() == "hook_failed" })
	if err := first.stop(); err != nil {
		t.Fatal(err)
	}

	// The control plane goes down; the host restarts with it down.
	m.Stop()
	second := startOfflineAgent(t, state, hk)
	harness.Eventually(t, 10*time.Second, "the owed hook runs as the agent starts, without the mesh", func() bool { return runs() == 2 })

	st := harness.Run(t, "", nil, bin.Meshhost, "status", "--state", state)
	if st.Code != 0 || !strings.Contains(st.Stdout, "the mesh is UNREACHABLE since") || !strings.Contains(st.Stdout, "FAILED: restart-app") {
		t.Fatalf("meshhost status with the mesh down: exit %d, want 0 saying the mesh is unreachable:\n%s", st.Code, st.Combined())
	}

	// Fixed by hand, and retried.
	if err := os.WriteFile(fixed, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r := harness.Run(t, "", nil, bin.Meshhost, "hooks", "retry", "--state", state, "--timeout", "30s")
	if r.Code != 0 || !strings.Contains(r.Stdout, "ran restart-app") || !strings.Contains(r.Stdout, "cannot reach the mesh now: it reports this outcome once it does") {
		t.Fatalf("hooks retry with the mesh down: exit %d, want 0, the hook run and the mesh named unreachable:\n%s\nagent log:\n%s", r.Code, r.Combined(), second.log)
	}
	if runs() != 3 {
		t.Fatalf("the hook ran %d times, want 3", runs())
	}
	if got := nodeErrorOffline(t, state); got != "" {
		t.Fatalf("meshhost status still shows %q after the retry succeeded", got)
	}

	// The control plane is back: the agent connects and reports the success.
	m.Start()
	harness.Eventually(t, 60*time.Second, "the control plane hears that the hook succeeded", func() bool {
		n, ok := m.Node("web-1")
		return ok && n.State == "alive" && n.LastError == nil && n.Applied != nil
	})
	st = harness.Run(t, "", nil, bin.Meshhost, "status", "--state", state)
	if st.Code != 0 || !strings.Contains(st.Stdout, "agent     connected to") {
		t.Fatalf("meshhost status once the mesh is back: exit %d:\n%s", st.Code, st.Combined())
	}
}

// nodeErrorOffline is the last error meshhost status reads from the state
// directory.
func nodeErrorOffline(t *testing.T, state string) string {
	t.Helper()
	st := harness.Run(t, "", nil, bin.Meshhost, "status", "--state", state)
	for _, line := range strings.Split(st.Stdout, "\n") {
		if rest, ok := strings.CutPrefix(line, "last error "); ok {
			return rest
		}
	}
	return ""
}
