package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/datadir"
	"mesh/integration/harness"
)

// Exit codes of meshctl: a removed control node, a data directory that cannot be
// used or is in use, an interrupted command.
const (
	ctlExitNotConverged = 5
	ctlExitRemoved      = 6
	ctlExitDataDir      = 7
	ctlExitInUse        = 8
	ctlExitInterrupted  = 9
)

// servePid is the pid of the live `meshctl serve --data dir`.
func servePid(t *testing.T, dir string) int {
	t.Helper()
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) < 2 || filepath.Base(args[0]) != "meshctl" || args[1] != "serve" {
			continue
		}
		if i := slices.Index(args, "--data"); i < 0 || i+1 >= len(args) || args[i+1] != dir {
			continue
		}
		if stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); strings.Contains(string(stat), ") Z ") {
			continue
		}
		return pid
	}
	t.Fatalf("no meshctl serve runs on %s", dir)
	return 0
}

// lockHolder is the pid the data directory's lock file records.
func lockHolder(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, datadir.LockFile))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// runTimed runs meshctl and says how long it took.
func runTimed(t *testing.T, stdin string, args ...string) (harness.Result, time.Duration) {
	t.Helper()
	start := time.Now()
	r := harness.Run(t, stdin, nil, bin.Meshctl, args...)
	return r, time.Since(start)
}

// TestSecondServeIsRefused: a second `meshctl serve` on a running node's data
// directory is refused at once, naming the process that holds it, and the first one
// goes on serving.
func TestSecondServeIsRefused(t *testing.T) {
	t.Parallel()
	cp := harness.NewControlPlane(t, bin, "lock-serve")
	cp.Serve()
	pid := servePid(t, cp.Dir)

	r, took := runTimed(t, "", "serve", "--data", cp.Dir, "--raft-heartbeat", "300ms")
	want := fmt.Sprintf("data directory %s is in use by pid %d (meshctl serve)", cp.Dir, pid)
	if r.Code != ctlExitInUse || !strings.Contains(r.Stderr, want) || !strings.Contains(r.Stderr, "stop that process") {
		t.Fatalf("second serve: exit %d, want %d and %q:\n%s", r.Code, ctlExitInUse, want, r.Combined())
	}
	if took > 2*time.Second {
		t.Errorf("the refusal took %s; it must come at once", took)
	}
	if strings.Contains(r.Stderr, "waiting for the replicated state") {
		t.Errorf("the refused serve started anyway:\n%s", r.Stderr)
	}
	if n := cp.Ctl("nodes"); n.Code != 0 || cp.Process().Exited() {
		t.Fatalf("the first serve stopped serving (nodes exit %d):\n%s", n.Code, n.Combined())
	}
	// Commands that only talk to the control plane take no lock.
	if tok := cp.Ctl("token", "--node", "web-1"); tok.Code != 0 {
		t.Fatalf("token while serve runs: exit %d:\n%s", tok.Code, tok.Combined())
	}
}

// TestBootstrapWhileServeRunsIsRefused: bootstrap run again on a serving node's
// directory, and its dry run, are refused at once naming the serve, and change
// nothing.
func TestBootstrapWhileServeRunsIsRefused(t *testing.T) {
	t.Parallel()
	cp := harness.NewControlPlane(t, bin, "lock-bootstrap")
	cp.Serve()
	pid := servePid(t, cp.Dir)
	pin := readConfig(t, cp.Dir)["ca_pin"]
	for _, extra := range [][]string{nil, {"--dry-run"}} {
		args := append([]string{"bootstrap", "--mesh", cp.Mesh, "--listen", cp.Listen, "--raft-listen", cp.Raft, "--cluster-listen", cp.Cluster, "--data", cp.Dir}, extra...)
		r, took := runTimed(t, "", args...)
		if r.Code != ctlExitInUse || !strings.Contains(r.Stderr, fmt.Sprintf("in use by pid %d (meshctl serve)", pid)) {
			t.Fatalf("bootstrap %v while serve runs: exit %d:\n%s", extra, r.Code, r.Combined())
		}
		if took > 2*time.Second {
			t.Errorf("bootstrap %v: the refusal took %s", extra, took)
		}
		if strings.Contains(r.Stdout, "plan:") {
			t.Errorf("bootstrap %v printed a plan for a directory in use:\n%s", extra, r.Stdout)
		}
	}
	if got := readConfig(t, cp.Dir)["ca_pin"]; got != pin {
		t.Fatalf("the CA pin changed: %s -> %s", pin, got)
	}
	if n := cp.Ctl("nodes"); n.Code != 0 {
		t.Fatalf("serve stopped serving:\n%s", n.Combined())
	}
}

// TestServeAfterSIGKILL: a serve killed with SIGKILL leaves its lock file behind,
// naming it; the next serve opens the directory all the same.
func TestServeAfterSIGKILL(t *testing.T) {
	t.Parallel()
	cp := harness.NewControlPlane(t, bin, "lock-kill")
	cp.Serve()
	pid := servePid(t, cp.Dir)
	cp.Process().Kill()
	stale := lockHolder(t, cp.Dir)
	if !strings.Contains(stale, fmt.Sprintf(`"pid":%d`, pid)) {
		t.Fatalf("the lock file does not name the killed serve %d: %q", pid, stale)
	}
	cp.Serve()
	if now := lockHolder(t, cp.Dir); !strings.Contains(now, fmt.Sprintf(`"pid":%d`, servePid(t, cp.Dir))) {
		t.Fatalf("the lock file does not name the new serve: %q", now)
	}
}

// TestSignalDuringServeStart: a joined node whose leader is down waits at start for
// its state to be current; SIGTERM (or SIGINT) then ends it within a couple of
// seconds, saying so, with exit 9; once the leader is back both start and serve.
func TestSignalDuringServeStart(t *testing.T) {
	t.Parallel()
	cp1 := harness.NewControlPlane(t, bin, "lock-start")
	cp1.Serve()
	tok, cp2 := cp1.ControlToken("cp-2")
	if r := cp2.Join(tok); r.Code != 0 {
		t.Fatalf("join (exit %d):\n%s", r.Code, r.Combined())
	}
	// SIGTERM stops a serving node: a requested stop, exit 0.
	cp1.Process().Signal(syscall.SIGTERM)
	if code := cp1.Process().Wait(10 * time.Second); code != 0 {
		t.Fatalf("serve stopped by SIGTERM: exit %d:\n%s", code, cp1.Process().Output())
	}

	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		p := harness.Start(t, nil, bin.Meshctl, "serve", "--data", cp2.Dir, "--raft-heartbeat", "300ms")
		p.WaitOutput(t, "waiting for the replicated state to be current", 20*time.Second)
		time.Sleep(500 * time.Millisecond)
		if p.Exited() {
			t.Fatalf("serve did not wait for its leader:\n%s", p.Output())
		}
		start := time.Now()
		p.Signal(sig)
		code := p.Wait(5 * time.Second)
		took := time.Since(start)
		if code != ctlExitInterrupted {
			t.Fatalf("%v during the start wait: exit %d after %s, want %d:\n%s", sig, code, took, ctlExitInterrupted, p.Output())
		}
		if took > 2500*time.Millisecond {
			t.Errorf("%v during the start wait: stopped after %s", sig, took)
		}
		t.Logf("%v during the start wait: exit %d after %s", sig, code, took)
		name := map[syscall.Signal]string{syscall.SIGTERM: "SIGTERM", syscall.SIGINT: "SIGINT"}[sig]
		for _, want := range []string{"interrupted by " + name + " while starting", "start it again with `meshctl serve --data " + cp2.Dir} {
			if !strings.Contains(p.Output(), want) {
				t.Errorf("%v: output lacks %q:\n%s", sig, want, p.Output())
			}
		}
	}

	cp1.Serve()
	cp2.Serve()
	harness.Eventually(t, 15*time.Second, "cp-2 replicates again", func() bool {
		c, ok := controlView(t, cp1)["cp-2"]
		return ok && c.State == api.StateAlive
	})
}

// TestSignalDuringJoin: SIGTERM while the join waits for the mesh (its broker
// stalled) ends it within a couple of seconds with exit 9 and how to resume, before
// admission and after it; the same token then completes the join.
func TestSignalDuringJoin(t *testing.T) {
	t.Parallel()
	cp1, proxy := harness.NewControlPlaneBehindProxy(t, bin, "lock-join")
	cp1.Serve()
	tok, cp2 := cp1.ControlToken("cp-2")
	args := []string{"join", "--data", cp2.Dir, "--raft-heartbeat", "300ms"}

	interrupt := func(what string, p *harness.Process) {
		t.Helper()
		time.Sleep(500 * time.Millisecond)
		if p.Exited() {
			t.Fatalf("%s: join did not wait:\n%s", what, p.Output())
		}
		start := time.Now()
		p.Signal(syscall.SIGTERM)
		code := p.Wait(5 * time.Second)
		took := time.Since(start)
		if code != ctlExitInterrupted || !strings.Contains(p.Output(), "interrupted by SIGTERM while") ||
			!strings.Contains(p.Output(), "again with the same token to resume") {
			t.Fatalf("%s: exit %d after %s, want %d saying how to resume:\n%s", what, code, took, ctlExitInterrupted, p.Output())
		}
		if took > 2500*time.Millisecond {
			t.Errorf("%s: stopped after %s", what, took)
		}
		t.Logf("%s: exit %d after %s:\n%s", what, code, took, p.Output())
	}

	// Before admission: the broker holds the TLS handshake.
	proxy.Stall()
	p := harness.StartWithInput(t, tok, bin.Meshctl, args...)
	p.WaitOutput(t, "is new", 10*time.Second)
	interrupt("before admission", p)
	proxy.Unstall()
	if readable(filepath.Join(cp2.Dir, datadir.ConfigFile)) {
		t.Fatal("an interrupted admission wrote mesh.json")
	}

	// After admission: the calls to the control plane stall.
	p = harness.StartWithInput(t, tok, bin.Meshctl, args...)
	p.WaitOutput(t, "admitted cp-2", 10*time.Second)
	proxy.Stall()
	interrupt("after admission", p)
	proxy.Unstall()

	r := cp2.Join(tok)
	if r.Code != 0 || !strings.Contains(r.Stdout, "resuming") || !strings.Contains(r.Stdout, "NATS route up") {
		t.Fatalf("the join resumed with the same token: exit %d:\n%s", r.Code, r.Combined())
	}
	cp2.Serve()
}

func readable(path string) bool {
	_, err := os.ReadFile(path)
	return err == nil
}

// TestBootstrapOnAJoinedNode: bootstrap, and its dry run, on the directory of a
// control node that joined refuse, whatever flags they are given, saying which mesh
// and node it is and that it joined; nothing is planned, no CA is made.
func TestBootstrapOnAJoinedNode(t *testing.T) {
	t.Parallel()
	cp1 := harness.NewControlPlane(t, bin, "lock-joined")
	cp1.Serve()
	tok, cp2 := cp1.ControlToken("cp-2")
	if r := cp2.Join(tok); r.Code != 0 {
		t.Fatalf("join (exit %d):\n%s", r.Code, r.Combined())
	}
	for _, extra := range [][]string{
		{"--node", "cp-2"},
		{"--node", "cp-2", "--dry-run"},
		nil, // the default node, cp-1
		{"--dry-run"},
	} {
		args := append([]string{"bootstrap", "--mesh", cp1.Mesh, "--listen", cp2.Listen, "--raft-listen", cp2.Raft, "--cluster-listen", cp2.Cluster, "--data", cp2.Dir}, extra...)
		r := harness.Run(t, "", nil, bin.Meshctl, args...)
		if r.Code != ctlExitDataDir {
			t.Fatalf("bootstrap %v on a joined node: exit %d, want %d:\n%s", extra, r.Code, ctlExitDataDir, r.Combined())
		}
		for _, want := range []string{"control node cp-2 of mesh " + cp1.Mesh, "joined the mesh with `meshctl join`", "when it joined, the CA key was on cp-1",
			"nothing to bootstrap or resume", "meshctl serve --data " + cp2.Dir} {
			if !strings.Contains(r.Stderr, want) {
				t.Errorf("bootstrap %v: the refusal lacks %q:\n%s", extra, want, r.Stderr)
			}
		}
		if strings.Contains(r.Stdout, "generate the mesh CA") || strings.Contains(r.Stdout, "plan:") {
			t.Errorf("bootstrap %v planned on a joined node:\n%s", extra, r.Stdout)
		}
	}
	if readable(filepath.Join(cp2.Dir, datadir.CAKeyFile)) {
		t.Fatal("bootstrap made a CA key on a joined node")
	}
	cp2.Serve()
}

// hostExitInUse is meshhost's exit code for a state directory held by another
// meshhost.
const hostExitInUse = 8

// TestSecondAgentIsRefused: a second `meshhost run` on a running agent's state
// directory, as an operator debugging by hand beside the service would start, is
// refused at once, naming the agent that holds it; an enrolment there is told the
// machine is enrolled, naming the agent. The
// first agent goes on applying declarations, alone: before, both applied each one
// into the same managed root and state files.
func TestSecondAgentIsRefused(t *testing.T) {
	t.Parallel()
	cp := harness.NewControlPlane(t, bin, "lock-agent")
	cp.Serve()
	web := harness.NewHost(t, bin, "web-1")
	if r := web.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	first := web.Run()
	first.WaitOutput(t, "connected to the mesh", 20*time.Second)

	start := time.Now()
	r := harness.Run(t, "", nil, bin.Meshhost, "run", "--state", web.State, "--root", web.Root)
	want := fmt.Sprintf("state directory %s is in use by pid %d (meshhost run)", web.State, first.Pid())
	if r.Code != hostExitInUse || !strings.Contains(r.Stderr, want) || !strings.Contains(r.Stderr, "stop that process") {
		t.Fatalf("second run: exit %d, want %d and %q:\n%s", r.Code, hostExitInUse, want, r.Combined())
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the refusal took %s; it must come at once", took)
	}
	// Enrolling there: what is in the way is the identity, not the lock (stopping
	// the agent, as "in use" advised, led to "already enrolled").
	enrolled := fmt.Sprintf("already enrolled: %s holds the identity of node \"web-1\"", filepath.Join(web.State, "identity.json"))
	running := fmt.Sprintf("(meshhost run, pid %d, is working on it now)", first.Pid())
	if r := web.Enrol(cp.Token("web-2")); r.Code != hostExitIdentity || !strings.Contains(r.Stderr, enrolled) || !strings.Contains(r.Stderr, running) {
		t.Fatalf("enrol while the agent runs: exit %d, want %d, %q and %q:\n%s", r.Code, hostExitIdentity, enrolled, running, r.Combined())
	}

	body := filepath.Join(t.TempDir(), "b.json")
	writeFile(t, body, `{"files":[{"path":"app.conf","content":"one agent"}]}`)
	if r := cp.Ctl("declare", "--node", "web-1", "--file", body, "--wait"); r.Code != 0 {
		t.Fatalf("declare: %s", r.Combined())
	}
	if got, err := web.ReadManaged("app.conf"); err != nil || got != "one agent" {
		t.Fatalf("app.conf = %q, %v", got, err)
	}
	if n := strings.Count(first.Output(), "declaration applied"); n != 1 {
		t.Errorf("the running agent applied %d declarations, want 1:\n%s", n, first.Output())
	}

	// Stopped, the directory is free again: the next agent starts.
	first.Signal(syscall.SIGTERM)
	first.Wait(10 * time.Second)
	web.Run().WaitOutput(t, "connected to the mesh", 20*time.Second)
}
