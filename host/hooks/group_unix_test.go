//go:build unix

package hooks

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestTimeoutKillsTheWholeGroup: a hook that leaves a background child holding its
// output open ends at its timeout (plus the grace for its pipes), and the child dies
// with it instead of outliving the hook.
func TestTimeoutKillsTheWholeGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	cfg, err := Load(write(t, `{"hooks":[
		{"name":"lingers","paths":["a"],"run":["sh","-c","sleep 60 & echo $! > `+pidFile+`; wait"],"timeout":"300ms"}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, failures := cfg.Run(context.Background(), t.TempDir(), []string{"a"})
	took := time.Since(start)
	if len(failures) != 1 || !strings.Contains(failures[0].Error(), "timed out") {
		t.Fatalf("failures %v", failures)
	}
	if took > 300*time.Millisecond+killGrace+time.Second {
		t.Fatalf("the hook held the caller for %s", took)
	}
	assertGone(t, pidFile)
}

// TestExitedHookLeavesNoChild: a hook that exits at once but leaves a child behind
// holding its stdout does not hold the caller for the child's life, and the child is
// killed.
func TestExitedHookLeavesNoChild(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	cfg, err := Load(write(t, `{"hooks":[
		{"name":"forks","paths":["a"],"run":["sh","-c","sleep 60 & echo $! > `+pidFile+`"],"timeout":"30s"}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cfg.Run(context.Background(), t.TempDir(), []string{"a"})
	if took := time.Since(start); took > killGrace+time.Second {
		t.Fatalf("a background child held the caller for %s", took)
	}
	assertGone(t, pidFile)
}

// TestAHookThatLeavesAChildHoldingItsOutputFails: a hook that exits 0 but leaves a
// process holding its output (`sh -c 'app --daemon &'`, an init script starting a
// daemon in its background) has failed, saying what happened and what to do, and
// what it left is killed: the daemon it meant to start is not running. Before, it
// failed with exec's words, "exec: WaitDelay expired before I/O complete", which
// said neither.
func TestAHookThatLeavesAChildHoldingItsOutputFails(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	cfg, err := Load(write(t, `{"hooks":[
		{"name":"starts-daemon","paths":["a"],"run":["sh","-c","sleep 60 & echo $! > `+pidFile+`; echo started; exit 0"],"timeout":"30s"}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	_, failures := cfg.Run(context.Background(), t.TempDir(), []string{"a"})
	if len(failures) != 1 || !errors.Is(failures[0].Err, ErrLeftBehind) {
		t.Fatalf("failures %v, want the hook's, ErrLeftBehind", failures)
	}
	msg := failures[0].Error()
	for _, want := range []string{"hook starts-daemon: it exited 0, but left a process holding its output", "killed", "systemctl", "started"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the failure %q does not say %q", msg, want)
		}
	}
	assertGone(t, pidFile)
}

// TestAStoppingAgentTermsItsHook: the agent stopping (systemctl stop or restart, a
// package upgrade's) sends a running hook's group SIGTERM, so that a hook amid
// apt-get, dpkg or a migration can stop cleanly, and kills it only if it is still
// there killGrace later: the agent's stop stays bounded (systemd waits 30 s). A
// hook's own timeout still kills it at once (TestTimeoutKillsTheWholeGroup).
// Before, a stop SIGKILLed the group at once: the hook could not clean up.
func TestAStoppingAgentTermsItsHook(t *testing.T) {
	dir := t.TempDir()
	stop := func(t *testing.T, script, started string) time.Duration {
		t.Helper()
		cfg, err := Load(write(t, `{"hooks":[{"name":"slow","paths":["a"],"run":["sh","-c",`+strconv.Quote(script)+`]}]}`))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan []Failure, 1)
		go func() { _, f := cfg.Run(ctx, dir, []string{"a"}); done <- f }()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if _, err := os.Stat(started); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the hook did not start")
			}
		}
		at := time.Now()
		cancel() // the agent's SIGTERM
		select {
		case <-done:
		case <-time.After(killGrace + 5*time.Second):
			t.Fatal("the hook held the agent's stop")
		}
		return time.Since(at)
	}

	cleaned := filepath.Join(dir, "cleaned-up")
	started := filepath.Join(dir, "started")
	// Short sleeps, not `sleep 30 & wait`: a SIGTERM that reaches the shell
	// between its touch and its wait is acted on when the wait ends (dash), and the
	// test failed under load at killGrace, the hook's fault, not the agent's.
	took := stop(t, "trap 'touch "+cleaned+"; exit 0' TERM; touch "+started+"; while :; do sleep 0.05; done", started)
	if _, err := os.Stat(cleaned); err != nil {
		t.Fatal("the hook was killed without a SIGTERM first: it could not clean up")
	}
	if took > time.Second {
		t.Errorf("a hook that stops at SIGTERM held the agent's stop for %s", took)
	}

	// One that ignores SIGTERM, and its child, are killed killGrace later.
	pidFile, started2 := filepath.Join(dir, "child.pid"), filepath.Join(dir, "started2")
	took = stop(t, "trap '' TERM; sleep 30 & echo $! > "+pidFile+"; touch "+started2+"; wait", started2)
	if took > killGrace+time.Second {
		t.Errorf("a hook that ignores SIGTERM held the agent's stop for %s", took)
	}
	assertGone(t, pidFile)
}

func assertGone(t *testing.T, pidFile string) {
	t.Helper()
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		// Signal 0 probes for the process; a zombie awaiting its reaper counts as gone.
		stat, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if syscall.Kill(pid, 0) != nil || strings.Contains(string(stat), ") Z ") {
			return
		}
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the hook's child %d outlived it", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestALeftoverHookIsKilled: an agent killed while a hook ran left the hook and its
// children running, and the agent started next ran the same hook beside them. The
// hook's group is recorded while it runs, KillLeftover kills what is left of it, and
// a record whose id another process holds now is not acted on.
func TestALeftoverHookIsKilled(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc here: the group is not recorded")
	}
	dir := t.TempDir()
	group, pidFile := filepath.Join(dir, "hook.group"), filepath.Join(dir, "child.pid")
	cfg, err := Load(write(t, `{"hooks":[{"name":"slow","paths":["a"],"run":["sh","-c","sleep 60 & echo $! > `+pidFile+`; wait"],"timeout":"1m"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.WithGroupFile(group)
	done := make(chan []Failure, 1)
	go func() { _, f := cfg.Run(context.Background(), t.TempDir(), []string{"a"}); done <- f }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(pidFile); err == nil {
			if _, err := os.Stat(group); err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the hook did not start, or its group was not recorded")
		}
		time.Sleep(10 * time.Millisecond)
	}
	b, _ := os.ReadFile(pidFile)
	child, _ := strconv.Atoi(strings.TrimSpace(string(b)))

	// The agent that ran it is gone; the next one finds the group and kills it.
	killed, err := KillLeftover(group)
	if err != nil || !killed {
		t.Fatalf("KillLeftover: %t, %v; want the hook's group killed", killed, err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the hook ran on after its group was killed")
	}
	if !gone(child, 5*time.Second) {
		t.Fatalf("the hook's child %d still runs", child)
	}
	if _, err := os.Stat(group); !os.IsNotExist(err) {
		t.Fatalf("the record stays once the group is gone: %v", err)
	}

	// Records left be: a process that runs now under the id, started at another
	// time; this process at its own start time, but in another boot; a group whose
	// leader exited, its id perhaps another group's since.
	self := os.Getpid()
	selfStart, err := startTime(self)
	if err != nil {
		t.Fatal(err)
	}
	leaderless := exec.Command("sh", "-c", "sleep 30 & exit 0")
	leaderless.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := leaderless.Run(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-leaderless.Process.Pid, syscall.SIGKILL) })
	for name, record := range map[string]string{
		"another start time": fmt.Sprintf("%d 1 %s\n", self, bootID()),
		"another boot":       fmt.Sprintf("%d %d not-this-boot\n", self, selfStart),
		"a leader gone":      fmt.Sprintf("%d %d %s\n", leaderless.Process.Pid, selfStart, bootID()),
	} {
		if err := os.WriteFile(group, []byte(record), 0o600); err != nil {
			t.Fatal(err)
		}
		if killed, err := KillLeftover(group); err != nil || killed {
			t.Fatalf("%s: %t, %v; want nothing done", name, killed, err)
		}
	}
	if err := syscall.Kill(-leaderless.Process.Pid, 0); err != nil {
		t.Fatalf("the group whose leader exited was killed: %v", err)
	}
	if killed, err := KillLeftover(group); err != nil || killed {
		t.Fatalf("no record: %t, %v", killed, err)
	}
}

// gone reports whether process pid has ended (or is a zombie, ended and not reaped
// yet: its new parent, init, reaps it when it will) within wait.
func gone(pid int, wait time.Duration) bool {
	deadline := time.Now().Add(wait)
	for {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return true
		}
		if i := strings.LastIndexByte(string(b), ')'); i > 0 && strings.HasPrefix(string(b[i+1:]), " Z") {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}
