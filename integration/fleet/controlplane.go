package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/datadir"
	"mesh/controlplane/operator"
)

// ControlPlane is a `meshctl serve` process, started and restarted from the built
// binary, and the data directory it serves. Every meshctl command the benchmark runs
// goes through Ctl, which keeps the CPU time those commands used.
type ControlPlane struct {
	// Meshctl is the built binary.
	Meshctl string
	// Dir is the data directory, on real disk.
	Dir string
	// LogPath receives the serve process's log (appended across restarts).
	LogPath string
	// LogLevel is serve's --log-level.
	LogLevel string
	// Listen is the broker address, set by Bootstrap.
	Listen string
	// Metrics, when set, is the address serve exposes /metrics on, and its profiler
	// when Pprof is set.
	Metrics string
	Pprof   bool

	mu        sync.Mutex
	cmd       *exec.Cmd
	done      chan struct{}
	exitedCPU time.Duration // CPU of the serve processes that ended

	ctlCPU atomic.Int64 // nanoseconds of CPU used by meshctl commands (Ctl)
}

// Bootstrap makes the mesh on three free loopback ports (broker, Raft, routes).
func (cp *ControlPlane) Bootstrap(ctx context.Context, mesh string) error {
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	cp.Listen = fmt.Sprintf("127.0.0.1:%d", ports[0])
	r, err := cp.Ctl(ctx, "bootstrap", "--mesh", mesh, "--listen", cp.Listen,
		"--raft-listen", fmt.Sprintf("127.0.0.1:%d", ports[1]),
		"--cluster-listen", fmt.Sprintf("127.0.0.1:%d", ports[2]))
	if err != nil {
		return err
	}
	if r.Code != 0 {
		return fmt.Errorf("meshctl bootstrap exited %d:\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	return nil
}

// Start starts `meshctl serve` (it does not wait for it to answer: see WaitAPI).
func (cp *ControlPlane) Start() error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.cmd != nil {
		return errors.New("serve is already running")
	}
	log, err := os.OpenFile(cp.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	args := []string{"serve", "--data", cp.Dir, "--log-level", cp.LogLevel}
	if cp.Metrics != "" {
		args = append(args, "--metrics-listen", cp.Metrics)
		if cp.Pprof {
			args = append(args, "--pprof")
		}
	}
	cmd := exec.Command(cp.Meshctl, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start meshctl serve: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		log.Close()
		cp.mu.Lock()
		cp.exitedCPU += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		cp.mu.Unlock()
		close(done)
	}()
	cp.cmd, cp.done = cmd, done
	return nil
}

// APIAttempt is one operator ping WaitAPI made: how long its connection and its
// call took, and why it failed (empty when it succeeded).
type APIAttempt struct {
	// AtMs is when the attempt began, from the start of the wait.
	AtMs   float64 `json:"at_ms"`
	DialMs float64 `json:"dial_ms"`
	CallMs float64 `json:"call_ms"`
	Err    string  `json:"err,omitempty"`
}

// APIWait is how WaitAPI's wait went.
type APIWait struct {
	Took time.Duration
	// Answered is when the answer came, by the clock every process of the machine
	// shares: the benchmark's own goroutines may be scheduled late in a storm.
	Began, Answered time.Time
	Attempts        []APIAttempt
}

// Summary says in a line how many pings it took and what the failed ones met.
func (w APIWait) Summary() string {
	if len(w.Attempts) == 0 {
		return "no ping made"
	}
	last := w.Attempts[len(w.Attempts)-1]
	s := fmt.Sprintf("%d ping(s) over %.0f ms; the answered one began at %.0f ms, connected in %.0f ms and was answered %.0f ms later",
		len(w.Attempts), ms(w.Took), last.AtMs, last.DialMs, last.CallMs)
	failed := map[string]int{}
	var order []string
	for _, a := range w.Attempts[:len(w.Attempts)-1] {
		if failed[a.Err] == 0 {
			order = append(order, a.Err)
		}
		failed[a.Err]++
	}
	for _, e := range order {
		s += fmt.Sprintf("; %d× %s", failed[e], e)
	}
	return s
}

// WaitAPI waits until the leader answers an operator ping, dialling again as long as
// the broker refuses connections, and says how long that took and what each ping met.
func (cp *ControlPlane) WaitAPI(ctx context.Context, limit time.Duration) (APIWait, error) {
	start := time.Now()
	deadline := start.Add(limit)
	w := APIWait{Began: start}
	var last error
	for time.Now().Before(deadline) {
		if err := ctx.Err(); err != nil {
			return w, err
		}
		if cp.exited() {
			return w, errors.New("meshctl serve exited; see " + cp.LogPath)
		}
		at := ms(time.Since(start))
		var a APIAttempt
		a, last = cp.ping()
		a.AtMs = at
		w.Attempts = append(w.Attempts, a)
		if last == nil {
			w.Answered = time.Now()
			w.Took = w.Answered.Sub(start)
			return w, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return w, fmt.Errorf("the control plane did not answer within %s: %v", limit, last)
}

// APIWaiter is WaitAPI run by the benchmark's binary (`wait-api`) in a process of
// its own, as an operator's client runs. In the benchmark's process the operator's
// client would share its threads with every agent reconnecting; and a process
// started after the kill would spend part of the wait starting up on a busy machine.
// So the process is started beforehand and waits for Begin.
type APIWaiter struct {
	cmd         *exec.Cmd
	begin       io.WriteCloser
	out, errOut bytes.Buffer
	waited      bool
}

// StartAPIWaiter starts self's wait-api for cp's data directory; it pings from Begin
// on, for at most limit.
func (cp *ControlPlane) StartAPIWaiter(ctx context.Context, self string, limit time.Duration) (*APIWaiter, error) {
	w := &APIWaiter{cmd: exec.CommandContext(ctx, self, "wait-api", "-data", cp.Dir, "-limit", limit.String())}
	w.cmd.Stdout, w.cmd.Stderr = &w.out, &w.errOut
	var err error
	if w.begin, err = w.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := w.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start fleetbench wait-api: %w", err)
	}
	return w, nil
}

// Begin starts the pings.
func (w *APIWaiter) Begin() error {
	_, err := io.WriteString(w.begin, "begin\n")
	return err
}

// Close stops the process if Wait was not called (a phase that failed before).
func (w *APIWaiter) Close() {
	if w.waited {
		return
	}
	w.begin.Close()
	_ = w.cmd.Process.Kill()
	_ = w.cmd.Wait()
	w.waited = true
}

// Wait waits until the process got an answer or gave up, and says how it went.
func (w *APIWaiter) Wait() (APIWait, error) {
	w.begin.Close()
	runErr := w.cmd.Wait()
	w.waited = true
	var r APIWait
	if err := json.Unmarshal(w.out.Bytes(), &r); err != nil {
		return r, fmt.Errorf("fleetbench wait-api: %v (%w); %s", err, runErr, bytes.TrimSpace(w.errOut.Bytes()))
	}
	if runErr != nil {
		return r, fmt.Errorf("fleetbench wait-api: %w; %s", runErr, bytes.TrimSpace(w.errOut.Bytes()))
	}
	return r, nil
}

// ping makes one operator ping and says how it went.
func (cp *ControlPlane) ping() (APIAttempt, error) {
	var a APIAttempt
	fail := func(err error) (APIAttempt, error) {
		a.Err = err.Error()
		if len(a.Err) > 120 {
			a.Err = a.Err[:120] + "…"
		}
		return a, err
	}
	t0 := time.Now()
	c, err := cp.Dial(operator.Options{Timeout: 2 * time.Second, LeaderWait: -1})
	a.DialMs = ms(time.Since(t0))
	if err != nil {
		return fail(err)
	}
	defer c.Close()
	t1 := time.Now()
	var res api.PingResult
	err = c.Call(api.OpPing, struct{}{}, &res)
	a.CallMs = ms(time.Since(t1))
	if err != nil {
		return fail(err)
	}
	if !res.Leader {
		return fail(errors.New("the answering node is not the leader"))
	}
	return a, nil
}

// Dial connects an operator client with the data directory's credentials.
func (cp *ControlPlane) Dial(o operator.Options) (*operator.Client, error) {
	return operator.Dial(datadir.Dir(cp.Dir), o)
}

// Running reports whether the serve process is running.
func (cp *ControlPlane) Running() bool {
	started, exited := cp.status()
	return started && !exited
}

// exited reports whether the serve process this ControlPlane started has exited
// (false for one it did not start, such as wait-api's).
func (cp *ControlPlane) exited() bool {
	_, exited := cp.status()
	return exited
}

func (cp *ControlPlane) status() (started, exited bool) {
	cp.mu.Lock()
	done := cp.done
	cp.mu.Unlock()
	if done == nil {
		return false, false
	}
	select {
	case <-done:
		return true, true
	default:
		return true, false
	}
}

// Kill sends SIGKILL and waits until the process is gone.
func (cp *ControlPlane) Kill() error { return cp.stop(syscall.SIGKILL, time.Minute) }

// Stop asks serve to stop (SIGTERM), and kills it if it has not within 20 s.
func (cp *ControlPlane) Stop() error {
	err := cp.stop(syscall.SIGTERM, 20*time.Second)
	if err != nil {
		return cp.Kill()
	}
	return nil
}

func (cp *ControlPlane) stop(sig syscall.Signal, limit time.Duration) error {
	cp.mu.Lock()
	cmd, done := cp.cmd, cp.done
	cp.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(limit):
		return fmt.Errorf("meshctl serve still running %s after %s", limit, sig)
	}
	cp.mu.Lock()
	cp.cmd, cp.done = nil, nil
	cp.mu.Unlock()
	return nil
}

// PID is the running serve process's id, or 0.
func (cp *ControlPlane) PID() int {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.cmd == nil {
		return 0
	}
	return cp.cmd.Process.Pid
}

// CPU is the CPU time every serve process used so far: the ones that ended and the
// running one.
func (cp *ControlPlane) CPU() (time.Duration, error) {
	cp.mu.Lock()
	cmd, done, total := cp.cmd, cp.done, cp.exitedCPU
	cp.mu.Unlock()
	if cmd == nil {
		return total, nil
	}
	d, err := ProcCPU(cmd.Process.Pid)
	if err == nil {
		return total + d, nil
	}
	// Reaped between the two reads: its rusage is about to be added.
	select {
	case <-done:
	case <-time.After(time.Second):
		return total, err
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.exitedCPU, nil
}

// CtlCPU is the CPU time the meshctl commands run through Ctl used so far.
func (cp *ControlPlane) CtlCPU() (time.Duration, error) {
	return time.Duration(cp.ctlCPU.Load()), nil
}

// RSS is the running serve process's resident set size in bytes.
func (cp *ControlPlane) RSS() (int64, error) {
	pid := cp.PID()
	if pid == 0 {
		return 0, errors.New("serve is not running")
	}
	return ProcRSS(pid)
}

// CtlResult is a finished meshctl command.
type CtlResult struct {
	Stdout, Stderr string
	Code           int
	Wall           time.Duration
}

// Ctl runs meshctl with args and --data, to completion.
func (cp *ControlPlane) Ctl(ctx context.Context, args ...string) (CtlResult, error) {
	cmd := exec.CommandContext(ctx, cp.Meshctl, append(args, "--data", cp.Dir)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	r := CtlResult{Stdout: out.String(), Stderr: errb.String(), Wall: time.Since(start)}
	if cmd.ProcessState != nil {
		cp.ctlCPU.Add(int64(cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()))
		r.Code = cmd.ProcessState.ExitCode()
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return r, fmt.Errorf("meshctl %s: %w", args[0], err)
	}
	return r, nil
}

// freePorts returns n distinct free TCP ports on 127.0.0.1.
func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// BuildMeshctl compiles meshctl into dir from the module at moduleRoot.
func BuildMeshctl(moduleRoot, dir string) (string, error) {
	out := filepath.Join(dir, "meshctl")
	cmd := exec.Command("go", "build", "-o", out, "./controlplane/cmd/meshctl")
	cmd.Dir = moduleRoot
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build meshctl: %v\n%s", err, msg)
	}
	return out, nil
}

// ModuleRoot is the directory of the go.mod of the module the working directory is in.
func ModuleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	mod := string(bytes.TrimSpace(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the module: run fleetbench from the repository")
	}
	return filepath.Dir(mod), nil
}
