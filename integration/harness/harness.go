// Package harness starts real meshes for the integration tests: control planes and
// host agents as the built binaries (subprocesses) or in-process, on loopback ports it
// picks itself, and the fault injectors the scenarios need.
package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/controlplane/api"
	"mesh/controlplane/datadir"
	"mesh/controlplane/operator"
	"mesh/controlplane/pki"
	"mesh/integration/freeport"
)

// Binaries are the built meshctl and meshhost, and the impostor test tool.
type Binaries struct {
	Meshctl  string
	Meshhost string
	Impostor string
}

// Build compiles both binaries into dir. Integration tests call it once from TestMain.
func Build(dir string) (Binaries, error) {
	b := Binaries{Meshctl: filepath.Join(dir, "meshctl"), Meshhost: filepath.Join(dir, "meshhost"), Impostor: filepath.Join(dir, "impostor")}
	root, err := moduleRoot()
	if err != nil {
		return b, err
	}
	for out, pkg := range map[string]string{b.Meshctl: "./controlplane/cmd/meshctl", b.Meshhost: "./host/cmd/meshhost", b.Impostor: "./integration/cmd/impostor"} {
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Dir = root
		if msg, err := cmd.CombinedOutput(); err != nil {
			return b, fmt.Errorf("go build %s: %v\n%s", pkg, err, msg)
		}
	}
	return b, nil
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the module")
	}
	return filepath.Dir(mod), nil
}

// FreePorts returns n distinct TCP ports on 127.0.0.1 that were free a moment ago,
// for processes the test starts later (freeport.Ports).
func FreePorts(t testing.TB, n int) []int { return freeport.Ports(t, n) }

// Result is a finished command.
type Result struct {
	Stdout, Stderr string
	Code           int
}

// Combined is stdout and stderr together, for assertions on messages.
func (r Result) Combined() string { return r.Stdout + r.Stderr }

// Run runs a binary to completion with stdin and extra environment.
func Run(t testing.TB, stdin string, env []string, bin string, args ...string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %s %v: %v", filepath.Base(bin), args, err)
	}
	return Result{Stdout: out.String(), Stderr: errb.String(), Code: code}
}

// Process is a long-running subprocess whose output is captured.
type Process struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
	err  error
}

type lockedWriter struct{ p *Process }

func (w lockedWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.out.Write(b)
}

// Start starts a subprocess; it is killed when the test ends.
func Start(t testing.TB, env []string, bin string, args ...string) *Process {
	t.Helper()
	return start(t, "", env, bin, args...)
}

// StartWithInput starts a subprocess with stdin.
func StartWithInput(t testing.TB, stdin string, bin string, args ...string) *Process {
	t.Helper()
	return start(t, stdin, nil, bin, args...)
}

func start(t testing.TB, stdin string, env []string, bin string, args ...string) *Process {
	t.Helper()
	p := &Process{done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdin = strings.NewReader(stdin)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = lockedWriter{p}, lockedWriter{p}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", filepath.Base(bin), err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			// A failure that shows up once in a loaded run is only understood from
			// what the programs said at the time.
			t.Logf("%s %s ended; its last output:\n%s", filepath.Base(bin), strings.Join(args, " "), lastLines(p.Output(), failureLines))
		}
	})
	return p
}

// failureLines is how much of each process's output a failed test shows.
const failureLines = 80

// lastLines is the end of s, at most n lines.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) <= n {
		return strings.Join(lines, "\n")
	}
	return fmt.Sprintf("[%d earlier lines]\n%s", len(lines)-n, strings.Join(lines[len(lines)-n:], "\n"))
}

// Output is everything the process wrote so far.
func (p *Process) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// Signal sends sig to the process.
func (p *Process) Signal(sig syscall.Signal) { _ = p.cmd.Process.Signal(sig) }

// Pid is the process's id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Kill kills the process with SIGKILL and waits for it.
func (p *Process) Kill() {
	p.Signal(syscall.SIGKILL)
	<-p.done
}

// Wait waits up to limit for the process to exit and returns its exit code, or -1
// if it is still running.
func (p *Process) Wait(limit time.Duration) int {
	select {
	case <-p.done:
		var ee *exec.ExitError
		if errors.As(p.err, &ee) {
			return ee.ExitCode()
		}
		return 0
	case <-time.After(limit):
		return -1
	}
}

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// WaitOutput waits until the output contains s.
func (p *Process) WaitOutput(t testing.TB, s string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !strings.Contains(p.Output(), s) {
		if time.Now().After(deadline) || p.Exited() && !strings.Contains(p.Output(), s) {
			t.Fatalf("output never contained %q within %s; output:\n%s", s, limit, p.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Eventually polls cond until it holds or limit passes.
func Eventually(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ControlPlane is a control node driven through the meshctl binary.
type ControlPlane struct {
	Bin     Binaries
	Dir     string
	Mesh    string
	Listen  string
	Raft    string
	Cluster string
	// Metrics is where serve answers /metrics. It is chosen with the node's other
	// ports: one chosen when serve starts could be the node's own broker port, free
	// until serve listens on it.
	Metrics string
	serve   *Process
	t       testing.TB
}

// NewControlPlane bootstraps a mesh in a fresh directory on free loopback ports.
func NewControlPlane(t testing.TB, bin Binaries, mesh string) *ControlPlane {
	t.Helper()
	return newControlPlane(t, bin, mesh, "", "")
}

// NewControlPlaneIn bootstraps a mesh like NewControlPlane, with its data directory
// at dir (which must not exist yet): on a file system the test made, for instance.
func NewControlPlaneIn(t testing.TB, bin Binaries, mesh, dir string) *ControlPlane {
	t.Helper()
	return newControlPlane(t, bin, mesh, "", dir)
}

// NewControlPlaneBehindProxy bootstraps a mesh whose advertised broker address (the
// one tokens carry and hosts dial) is a Proxy in front of the real broker, so every
// host connection can be slowed, stalled or cut. Operators connect directly.
func NewControlPlaneBehindProxy(t testing.TB, bin Binaries, mesh string) (*ControlPlane, *Proxy) {
	t.Helper()
	proxy := StartProxy(t, "127.0.0.1:0", "127.0.0.1:1")
	cp := newControlPlane(t, bin, mesh, proxy.Addr(), "")
	proxy.SetTarget(cp.Listen)
	return cp, proxy
}

// NewControlPlaneOn bootstraps a mesh like NewControlPlane, its broker, Raft and
// cluster listening on the given loopback addresses (127.0.0.0/8): a control node
// whose control traffic is on another network than its hosts'.
func NewControlPlaneOn(t testing.TB, bin Binaries, mesh string, ips [3]string) *ControlPlane {
	t.Helper()
	return newControlPlaneOn(t, bin, mesh, "", "", ips)
}

func newControlPlane(t testing.TB, bin Binaries, mesh, advertise, dir string) *ControlPlane {
	t.Helper()
	return newControlPlaneOn(t, bin, mesh, advertise, dir, [3]string{"127.0.0.1", "127.0.0.1", "127.0.0.1"})
}

func newControlPlaneOn(t testing.TB, bin Binaries, mesh, advertise, dir string, ips [3]string) *ControlPlane {
	t.Helper()
	if dir == "" {
		dir = filepath.Join(t.TempDir(), "cp")
	}
	ports := FreePorts(t, 4)
	cp := &ControlPlane{
		Bin: bin, Dir: dir, Mesh: mesh, t: t,
		Listen:  fmt.Sprintf("%s:%d", ips[0], ports[0]),
		Raft:    fmt.Sprintf("%s:%d", ips[1], ports[1]),
		Cluster: fmt.Sprintf("%s:%d", ips[2], ports[2]),
		Metrics: fmt.Sprintf("127.0.0.1:%d", ports[3]),
	}
	args := []string{"bootstrap", "--mesh", mesh, "--listen", cp.Listen, "--raft-listen", cp.Raft, "--cluster-listen", cp.Cluster}
	if advertise != "" {
		args = append(args, "--advertise", advertise)
	}
	r := cp.Ctl(args...)
	if r.Code != 0 {
		t.Fatalf("bootstrap failed (%d):\n%s", r.Code, r.Combined())
	}
	return cp
}

// Ctl runs meshctl with --data set.
func (cp *ControlPlane) Ctl(args ...string) Result {
	cp.t.Helper()
	return Run(cp.t, "", nil, cp.Bin.Meshctl, append(args, "--data", cp.Dir)...)
}

// Serve starts `meshctl serve` and waits until it answers operators.
func (cp *ControlPlane) Serve(extra ...string) *Process {
	cp.t.Helper()
	cp.StartServe(extra...)
	cp.WaitServing()
	return cp.serve
}

// StartServe starts `meshctl serve` without waiting for it. Tests that restart
// several control nodes at once start them all first and then WaitServing on
// each from the test's own goroutine: a node cannot answer before a quorum is
// up, and a helper that fails outside the test's goroutine would hang the test
// instead of failing it.
func (cp *ControlPlane) StartServe(extra ...string) *Process {
	cp.t.Helper()
	cp.serve = Start(cp.t, nil, cp.Bin.Meshctl, cp.serveArgs(extra...)...)
	return cp.serve
}

// serveArgs are the arguments of `meshctl serve` the tests run, then extra.
func (cp *ControlPlane) serveArgs(extra ...string) []string {
	// Snapshots are frequent here so that tests see the log compacted and read
	// snapshots as well as the log.
	return append([]string{"serve", "--data", cp.Dir}, withDefaults([]string{"--raft-heartbeat", "300ms", "--reconcile", "1s",
		"--raft-snapshot-interval", "1s", "--raft-snapshot-threshold", "8",
		// Agents here report every second (Host.Run), so three silent seconds is offline.
		"--offline-after", "3s", "--metrics-listen", cp.Metrics}, extra)...)
}

// withDefaults returns extra after the flag/value pairs of defaults it does not
// give itself: a flag that takes one value may be given once.
func withDefaults(defaults, extra []string) []string {
	var out []string
	for i := 0; i+1 < len(defaults); i += 2 {
		given := false
		for _, a := range extra {
			if a == defaults[i] || strings.HasPrefix(a, defaults[i]+"=") {
				given = true
			}
		}
		if !given {
			out = append(out, defaults[i], defaults[i+1])
		}
	}
	return append(out, extra...)
}

// ServeWithOpenFiles starts `meshctl serve` as StartServe does, its open-file limit
// (soft and hard) lowered to n by the shell first, and waits until it answers
// operators.
func (cp *ControlPlane) ServeWithOpenFiles(n int, extra ...string) *Process {
	cp.t.Helper()
	script := fmt.Sprintf(`ulimit -n %d && exec "$0" "$@"`, n)
	cp.serve = Start(cp.t, nil, "/bin/sh", append([]string{"-c", script, cp.Bin.Meshctl}, cp.serveArgs(extra...)...)...)
	cp.WaitServing()
	return cp.serve
}

// ServeWithUmask starts `meshctl serve` as StartServe does, under the file mode
// creation mask umask (octal, as the shell's umask takes it), and waits until it
// answers operators.
func (cp *ControlPlane) ServeWithUmask(umask string, extra ...string) *Process {
	cp.t.Helper()
	script := fmt.Sprintf(`umask %s && exec "$0" "$@"`, umask)
	cp.serve = Start(cp.t, nil, "/bin/sh", append([]string{"-c", script, cp.Bin.Meshctl}, cp.serveArgs(extra...)...)...)
	cp.WaitServing()
	return cp.serve
}

// WaitServing waits until the serve process StartServe began answers operators.
func (cp *ControlPlane) WaitServing() {
	cp.t.Helper()
	cp.serve.WaitOutput(cp.t, "control node ready", 30*time.Second)
	Eventually(cp.t, 20*time.Second, "control plane "+cp.Listen+" answers operators", func() bool { return cp.Ctl("nodes").Code == 0 })
}

// Process is the running serve process.
func (cp *ControlPlane) Process() *Process { return cp.serve }

// Token mints a token and returns its text.
func (cp *ControlPlane) Token(node string, extra ...string) string {
	cp.t.Helper()
	r := cp.Ctl(append([]string{"token", "--node", node}, extra...)...)
	if r.Code != 0 {
		cp.t.Fatalf("token for %s failed (%d): %s", node, r.Code, r.Combined())
	}
	return r.Stdout
}

// Nodes returns the roster.
func (cp *ControlPlane) Nodes() api.NodesResult {
	cp.t.Helper()
	r := cp.Ctl("nodes", "--json")
	if r.Code != 0 {
		cp.t.Fatalf("nodes failed (%d): %s", r.Code, r.Combined())
	}
	var res api.NodesResult
	if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil {
		cp.t.Fatalf("nodes --json: %v\n%s", err, r.Stdout)
	}
	return res
}

// Node returns one node's view, or false.
func (cp *ControlPlane) Node(id string) (api.NodeView, bool) {
	for _, n := range cp.Nodes().Nodes {
		if n.ID == id {
			return n, true
		}
	}
	return api.NodeView{}, false
}

// WaitConverged waits until node has applied version.
func (cp *ControlPlane) WaitConverged(node string, version uint64, limit time.Duration) {
	cp.t.Helper()
	Eventually(cp.t, limit, fmt.Sprintf("%s applies v%d", node, version), func() bool {
		n, ok := cp.Node(node)
		return ok && n.Applied != nil && *n.Applied == version
	})
}

// Host is a machine driven through the meshhost binary.
type Host struct {
	Bin   Binaries
	Name  string
	State string
	Root  string
	run   *Process
	t     testing.TB
}

// NewHost makes a host with its own state directory.
func NewHost(t testing.TB, bin Binaries, name string) *Host {
	dir := filepath.Join(t.TempDir(), name)
	return &Host{Bin: bin, Name: name, State: dir, Root: filepath.Join(dir, "managed"), t: t}
}

// Enrol runs `meshhost enrol` with the token on stdin.
func (h *Host) Enrol(token string, extra ...string) Result {
	h.t.Helper()
	return Run(h.t, token, nil, h.Bin.Meshhost, append([]string{"enrol", "--state", h.State}, extra...)...)
}

// Run starts `meshhost run`.
func (h *Host) Run(extra ...string) *Process {
	h.t.Helper()
	h.run = Start(h.t, nil, h.Bin.Meshhost, append([]string{"run", "--state", h.State, "--root", h.Root}, withDefaults([]string{"--heartbeat", "1s"}, extra)...)...)
	return h.run
}

// Process is the running agent.
func (h *Host) Process() *Process { return h.run }

// ReadManaged reads a file under the managed root.
func (h *Host) ReadManaged(rel string) (string, error) {
	b, err := os.ReadFile(filepath.Join(h.Root, filepath.FromSlash(rel)))
	return string(b), err
}

// OperatorConn connects to the control plane's broker with the data directory's
// operator credentials, checking the pin like any client: the vantage point of a party
// with broker access.
func (cp *ControlPlane) OperatorConn() *nats.Conn {
	cp.t.Helper()
	cfg, err := datadir.Dir(cp.Dir).LoadConfig()
	if err != nil {
		cp.t.Fatal(err)
	}
	pin, err := cfg.Pin()
	if err != nil {
		cp.t.Fatal(err)
	}
	nc, err := nats.Connect("tls://"+cp.Listen,
		operator.CredsLogin(filepath.Join(cp.Dir, datadir.AdminCredsFile), pki.PinnedClientConfig(pin), 10*time.Second)...)
	if err != nil {
		cp.t.Fatalf("operator connection: %v", err)
	}
	cp.t.Cleanup(nc.Close)
	return nc
}

// ControlToken mints, on cp (which must hold the CA key), a control token for a new
// control node on fresh loopback ports, and returns the token and the node to join
// with it (not joined yet).
func (cp *ControlPlane) ControlToken(node string) (string, *ControlPlane) {
	cp.t.Helper()
	return cp.ControlTokenOn(node, [3]string{"127.0.0.1", "127.0.0.1", "127.0.0.1"})
}

// ControlTokenOn is ControlToken for a node whose broker, Raft and cluster listen
// on the given loopback addresses.
func (cp *ControlPlane) ControlTokenOn(node string, ips [3]string) (string, *ControlPlane) {
	cp.t.Helper()
	ports := FreePorts(cp.t, 4)
	n := &ControlPlane{
		Bin: cp.Bin, Dir: filepath.Join(cp.t.TempDir(), node), Mesh: cp.Mesh, t: cp.t,
		Listen:  fmt.Sprintf("%s:%d", ips[0], ports[0]),
		Raft:    fmt.Sprintf("%s:%d", ips[1], ports[1]),
		Cluster: fmt.Sprintf("%s:%d", ips[2], ports[2]),
		Metrics: fmt.Sprintf("127.0.0.1:%d", ports[3]),
	}
	r := cp.Ctl("token", "--role", "control", "--node", node, "--addr", n.Listen, "--raft-addr", n.Raft, "--cluster-addr", n.Cluster)
	if r.Code != 0 {
		cp.t.Fatalf("control token for %s (%d): %s", node, r.Code, r.Combined())
	}
	return r.Stdout, n
}

// ControlTokenBehindNAT is ControlToken for a node hosts reach through NAT: its
// token's broker address, advertised, is 192.0.2.10 (TEST-NET-1, no machine's),
// at the port of the node's Listen, 127.0.0.1, which its join must be given.
func (cp *ControlPlane) ControlTokenBehindNAT(node string) (token, advertised string, n *ControlPlane) {
	cp.t.Helper()
	ports := FreePorts(cp.t, 4)
	n = &ControlPlane{
		Bin: cp.Bin, Dir: filepath.Join(cp.t.TempDir(), node), Mesh: cp.Mesh, t: cp.t,
		Listen:  fmt.Sprintf("127.0.0.1:%d", ports[0]),
		Raft:    fmt.Sprintf("127.0.0.1:%d", ports[1]),
		Cluster: fmt.Sprintf("127.0.0.1:%d", ports[2]),
		Metrics: fmt.Sprintf("127.0.0.1:%d", ports[3]),
	}
	advertised = fmt.Sprintf("192.0.2.10:%d", ports[0])
	r := cp.Ctl("token", "--role", "control", "--node", node, "--addr", advertised, "--raft-addr", n.Raft, "--cluster-addr", n.Cluster)
	if r.Code != 0 {
		cp.t.Fatalf("control token for %s (%d): %s", node, r.Code, r.Combined())
	}
	return r.Stdout, advertised, n
}

// Join runs `meshctl join` for this (new) control node with token.
func (cp *ControlPlane) Join(token string) Result {
	cp.t.Helper()
	return Run(cp.t, token, nil, cp.Bin.Meshctl, "join", "--data", cp.Dir, "--raft-heartbeat", "300ms")
}
