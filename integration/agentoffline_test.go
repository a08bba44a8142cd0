package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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

func startOfflineAgent(t *testing.T, state string, hk hooks.Config, more ...func(*agent.Options)) *offlineAgent {
	t.Helper()
	buf := &lockedBuffer{}
	o := agent.Options{
		StateDir: state, Root: filepath.Join(state, "managed"), Heartbeat: time.Second, Hooks: hk,
		Socket: agent.SocketPath(state),
		Logger: slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	for _, f := range more {
		f(&o)
	}
	a, err := agent.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	oa := &offlineAgent{a: a, log: buf}
	var once sync.Once
	var runErr error
	oa.stop = func() error {
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
	t.Cleanup(func() { oa.stop() })
	return oa
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

// downMesh is a host enrolled in an in-process mesh that is then stopped: every
// broker it knows refuses connections.
func downMesh(t *testing.T, mesh string) (state, broker string) {
	t.Helper()
	m := harness.StartMesh(t, mesh, harness.Options{})
	state, err := harness.EnrolHost(t, m.Token("web-1", 10*time.Minute).Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	m.Stop()
	return state, m.Listen
}

// TestAgentStartedWithEveryBrokerDown: meshhost run started while no broker of the
// mesh answers (a control plane down at boot) says so in its log once, then once a
// minute at most; tells systemd it is up, with a status line saying it waits for the mesh
// (else TimeoutStartSec restarts it every 5 minutes, each start running a failed
// hook again); its metrics and /readyz say it is not connected, meshhost status
// that the mesh is unreachable; SIGTERM stops it at once, exit 0.
func TestAgentStartedWithEveryBrokerDown(t *testing.T) {
	t.Parallel()
	state, _ := downMesh(t, "offline")
	sock, msgs := notifySocket(t)
	metrics := fmt.Sprintf("127.0.0.1:%d", harness.FreePorts(t, 1)[0])
	p := harness.Start(t, []string{"NOTIFY_SOCKET=" + sock}, bin.Meshhost, "run", "--state", state, "--root", filepath.Join(state, "managed"),
		"--metrics-listen", metrics)
	if m := waitNotify(t, msgs, "READY=1", 15*time.Second, p); !strings.Contains(m, "running without the mesh, which does not answer") {
		t.Errorf("readiness with the mesh down: %q", m)
	}
	fams := harness.Scrape(t, "http://"+metrics+"/metrics")
	if c, s := harness.Sum(fams, "mesh_agent_connected"), harness.Sum(fams, "mesh_agent_synced"); c != 0 || s != 0 {
		t.Errorf("mesh_agent_connected %v, mesh_agent_synced %v with every broker down, want 0 and 0", c, s)
	}
	if resp, err := http.Get("http://" + metrics + "/readyz"); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/readyz with every broker down: %v %v, want 503", resp, err)
	} else {
		resp.Body.Close()
	}
	st := harness.Run(t, "", nil, bin.Meshhost, "status", "--state", state)
	if st.Code != 0 || !strings.Contains(st.Stdout, "the mesh is UNREACHABLE since") || !strings.Contains(st.Stdout, "every broker refused the connection") {
		t.Errorf("meshhost status with every broker down: exit %d, want 0 saying why the mesh is unreachable:\n%s", st.Code, st.Combined())
	}
	// Backing off (1 s, 2 s, 4 s...), next to no CPU, and the same problem logged
	// once a minute at most: one line in 6 s (it was one per attempt, every 30 s
	// for an outage's length).
	cpu0 := cpuTime(t, p.Pid())
	time.Sleep(5 * time.Second)
	if n := strings.Count(p.Output(), "cannot reach the mesh yet"); n != 1 {
		t.Errorf("%d lines 'cannot reach the mesh yet' in about 6 s, want 1:\n%s", n, p.Output())
	}
	if used := cpuTime(t, p.Pid()) - cpu0; used > time.Second {
		t.Errorf("the agent used %s of CPU in 5 s waiting for the mesh: it spins", used)
	}
	if _, err := os.Stat(agent.SocketPath(state)); err != nil {
		t.Errorf("no socket while the agent waits for the mesh: %v", err)
	}
	start := time.Now()
	p.Signal(syscall.SIGTERM)
	if code := p.Wait(3 * time.Second); code != 0 {
		t.Fatalf("SIGTERM while waiting for the mesh: exit %d after %s, want 0 within 3s:\n%s", code, time.Since(start), p.Output())
	}
	if _, err := os.Stat(agent.SocketPath(state)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the socket stays after the agent stopped: %v", err)
	}
	waitNotify(t, msgs, "STOPPING=1", 5*time.Second, p)
}

// TestSIGTERMWhileABrokerHoldsTheHandshake: SIGTERM stops an agent at once while
// its first connection is held by a broker address that accepts TCP and never
// answers the TLS handshake (a stopped or wedged process, its kernel still
// accepting), each attempt of which lasts the dial timeout (10 s).
func TestSIGTERMWhileABrokerHoldsTheHandshake(t *testing.T) {
	state, broker := downMesh(t, "offline")
	ln, err := net.Listen("tcp", broker)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	t.Cleanup(func() {
		for len(accepted) > 0 {
			(<-accepted).Close()
		}
	})
	p := harness.Start(t, nil, bin.Meshhost, "run", "--state", state, "--root", filepath.Join(state, "managed"))
	select {
	case c := <-accepted:
		accepted <- c
	case <-time.After(15 * time.Second):
		t.Fatalf("the agent never dialled its broker:\n%s", p.Output())
	}
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	p.Signal(syscall.SIGTERM)
	if code := p.Wait(3 * time.Second); code != 0 {
		t.Fatalf("SIGTERM while a broker holds the handshake: exit %d after %s, want 0 within 3s:\n%s", code, time.Since(start), p.Output())
	}
}

// TestAgentWhileTheMeshIsDownAfterConnecting: the control plane stops under a
// connected agent. meshhost status says since when the mesh is unreachable and why;
// once the control plane is back the agent reconnects, syncs, reports, and applies
// what is declared.
func TestAgentWhileTheMeshIsDownAfterConnecting(t *testing.T) {
	m := harness.StartMesh(t, "offline", harness.Options{})
	state, err := harness.EnrolHost(t, m.Token("web-1", 10*time.Minute).Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	startOfflineAgent(t, state, hooks.Config{})
	v := m.Declare("web-1", `{"files":[{"path":"etc/app.conf","content":"one\n"}]}`)
	m.WaitApplied("web-1", v, 20*time.Second)
	down := time.Now()
	m.Stop()
	harness.Eventually(t, 20*time.Second, "the agent notices the mesh is gone", func() bool {
		st, err := agent.AskStatus(state, 2*time.Second)
		return err == nil && !st.Connected && st.Error != ""
	})
	st, _ := agent.AskStatus(state, 2*time.Second)
	if st.Since.Before(down.Add(-time.Second)) {
		t.Errorf("unreachable since %v, before the mesh stopped at %v", st.Since, down)
	}
	r := harness.Run(t, "", nil, bin.Meshhost, "status", "--state", state)
	if r.Code != 0 || !strings.Contains(r.Stdout, "the mesh is UNREACHABLE since") {
		t.Errorf("meshhost status with the mesh gone: exit %d:\n%s", r.Code, r.Combined())
	}
	m.Start()
	v = m.Declare("web-1", `{"files":[{"path":"etc/app.conf","content":"two\n"}]}`)
	m.WaitApplied("web-1", v, 60*time.Second)
}

// TestDeclarationExpiresWhileTheMeshIsDown: the whole mesh is down longer than the
// applied declaration's validity (24 h, on a clock the test moves). The agent keeps
// its files and calls itself stale (mesh_agent_stale); once the control plane is
// back it re-signs the declaration, and the agent takes the refresh: not stale, the
// files untouched, as docs/declarations.md (Freshness) says.
func TestDeclarationExpiresWhileTheMeshIsDown(t *testing.T) {
	var skew atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	m := harness.StartMesh(t, "offline", harness.Options{Now: now})
	state, err := harness.EnrolHost(t, m.Token("web-1", 10*time.Minute).Encode(), now)
	if err != nil {
		t.Fatal(err)
	}
	metrics := fmt.Sprintf("127.0.0.1:%d", harness.FreePorts(t, 1)[0])
	startOfflineAgent(t, state, hooks.Config{}, func(o *agent.Options) { o.Now, o.MetricsListen = now, metrics })
	v := m.Declare("web-1", `{"files":[{"path":"etc/app.conf","content":"one\n"}]}`)
	m.WaitApplied("web-1", v, 20*time.Second)
	stale := func() float64 {
		return harness.Sum(harness.Scrape(t, "http://"+metrics+"/metrics"), "mesh_agent_stale")
	}
	if got := stale(); got != 0 {
		t.Fatalf("mesh_agent_stale %v with a fresh declaration", got)
	}
	m.Stop()
	skew.Store(int64(25 * time.Hour))
	if got := stale(); got != 1 {
		t.Fatalf("mesh_agent_stale %v with the declaration expired and the mesh down, want 1", got)
	}
	m.Start()
	harness.Eventually(t, 60*time.Second, "the refreshed declaration reaches the agent", func() bool { return stale() == 0 })
	harness.Eventually(t, 20*time.Second, "the control plane sees the node fresh", func() bool {
		n, ok := m.Node("web-1")
		return ok && n.State == "alive" && !n.Stale && n.Applied != nil && *n.Applied == v && n.LastError == nil
	})
	if b, err := os.ReadFile(filepath.Join(state, "managed", "etc", "app.conf")); err != nil || string(b) != "one\n" {
		t.Fatalf("etc/app.conf = %q, %v: the files stay as they were", b, err)
	}
}

// TestAgentStatusLineFollowsTheMesh: systemd's status line of a running agent says
// when the mesh it was connected to stops answering, and when it is back. Before,
// it said "connected and synced" from the first sync on, whatever happened since.
func TestAgentStatusLineFollowsTheMesh(t *testing.T) {
	t.Parallel()
	m := harness.StartMesh(t, "offline", harness.Options{})
	state, err := harness.EnrolHost(t, m.Token("web-1", 10*time.Minute).Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	sock, msgs := notifySocket(t)
	p := harness.Start(t, []string{"NOTIFY_SOCKET=" + sock}, bin.Meshhost, "run", "--state", state, "--root", filepath.Join(state, "managed"))
	waitNotify(t, msgs, "connected and synced", 20*time.Second, p)
	m.Stop()
	waitNotify(t, msgs, "running without the mesh, which does not answer", 30*time.Second, p)
	m.Start()
	waitNotify(t, msgs, "connected and synced", 60*time.Second, p)
}

// cpuTime is the CPU time (user and system) process pid used so far, from
// /proc/PID/stat; the test is skipped where there is none.
func cpuTime(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Skipf("no /proc/%d/stat to read the agent's CPU time from: %v", pid, err)
	}
	// The fields after the command's closing parenthesis: utime and stime are the
	// 12th and 13th, in clock ticks (100 a second on Linux).
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("/proc/%d/stat: %q", pid, b)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// TestAnAgentSaysStoppingAsItsStopBegins: an agent stopped while a hook runs gives
// the hook its grace (SIGTERM, then SIGKILL 2 s later) before it exits; it told the
// service manager STOPPING=1 only once it had, so the unit looked as running
// meanwhile. It says so as the stop begins.
func TestAnAgentSaysStoppingAsItsStopBegins(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "stopping")
	cp.Serve()
	h := harness.NewHost(t, bin, "web-1")
	if r := h.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	dir := t.TempDir()
	started := filepath.Join(dir, "started")
	hooksFile := filepath.Join(dir, "hooks.json")
	writeFile(t, hooksFile, `{"hooks":[{"name":"slow","paths":["etc/*"],"timeout":"60s","run":["sh","-c",`+
		`"trap '' TERM; touch `+started+`; sleep 30"]}]}`)
	sock, msgs := notifySocket(t)
	p := harness.Start(t, []string{"NOTIFY_SOCKET=" + sock}, bin.Meshhost, "run", "--state", h.State, "--root", h.Root, "--heartbeat", "1s", "--hooks", hooksFile)
	waitNotify(t, msgs, "READY=1", 30*time.Second, p)
	body := filepath.Join(dir, "app.json")
	writeFile(t, body, `{"files":[{"path":"etc/app.conf","content":"x\n"}]}`)
	if r := cp.Ctl("declare", "--node", "web-1", "--file", body); r.Code != 0 {
		t.Fatalf("declare: %s", r.Combined())
	}
	harness.Eventually(t, 30*time.Second, "the hook runs", func() bool {
		_, err := os.Stat(started)
		return err == nil
	})
	p.Signal(syscall.SIGTERM)
	waitNotify(t, msgs, "STOPPING=1", 10*time.Second, p)
	said := time.Now()
	if code := p.Wait(15 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0:\n%s", code, p.Output())
	}
	// The hook's grace (2 s) lies between the two: said as the stop ended, they
	// came together.
	if gap := time.Since(said); gap < time.Second {
		t.Errorf("the agent exited %s after it said STOPPING=1: said as its stop ended, not as it began", gap)
	}
}
