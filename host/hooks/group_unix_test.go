//go:build unix

package hooks

import (
	"context"
	"os"
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
