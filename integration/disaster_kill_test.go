package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"mesh/host/state"
	"mesh/integration/harness"
)

var attemptRE = regexp.MustCompile(`^attempt (\d+)\n(x*)$`)

// TestDisasterKillDuringDeclarations: meshctl serve and meshhost run are killed with
// SIGKILL, one or the other or both, at random moments while declarations stream
// in, and started again. Across it all: a declaration serve acknowledged is never
// lost (the version it reported is still declared after the restart), the host's
// applied version never goes back and no run applies an older one after a newer,
// its state files are whole, and in the end the host converges on the last
// declaration with the managed file whole, holding that declaration's content or a
// later attempt's (a declare killed before it answered may still have committed),
// and the hook on that file, owed across the kills, has run on it.
func TestDisasterKillDuringDeclarations(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "diskill")
	cp.Serve()
	h := harness.NewHost(t, bin, "web-1")
	if r := h.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	// A hook on the managed file records its first line each time it runs.
	hookDir := t.TempDir()
	hookLog := filepath.Join(hookDir, "hook.log")
	hooks := filepath.Join(hookDir, "hooks.json")
	writeFile(t, hooks, `{"hooks":[{"name":"record","paths":["app.conf"],"run":["sh","-c","head -n1 \"$MESH_ROOT/app.conf\" >> `+hookLog+`"]}]}`)
	runAgent := func() *harness.Process { return h.Run("--hooks", hooks) }
	agent := runAgent()

	const pad = 32 << 10
	var (
		mu         sync.Mutex
		ackedVer   uint64 // the highest version a declare reported
		ackedTry   int    // the attempt that declared it
		stop       atomic.Bool
		done       = make(chan struct{})
		bodyDir    = t.TempDir()
		acknowlege = regexp.MustCompile(`declared web-1 v(\d+)`)
	)
	// The writer calls nothing of t (a test may only fail from its own goroutine:
	// cp.Ctl fails it when meshctl cannot start), reports on failed, and has
	// stopped before the control plane and its directory are removed, however the
	// test ends.
	failed := make(chan error, 1)
	t.Cleanup(func() { stop.Store(true); <-done })
	go func() {
		defer close(done)
		for i := 1; !stop.Load(); i++ {
			body := filepath.Join(bodyDir, fmt.Sprintf("b%d.json", i))
			if err := os.WriteFile(body, fmt.Appendf(nil, `{"files":[{"path":"app.conf","content":"attempt %d\n%s"}]}`, i, strings.Repeat("x", pad)), 0o600); err != nil {
				failed <- err
				return
			}
			// serve is killed meanwhile: a declaration it did not take is expected.
			// Bounded as the harness bounds what it runs: a meshctl that hangs
			// is killed, its declaration not counted, rather than hanging the
			// test.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			out, _ := exec.CommandContext(ctx, cp.Bin.Meshctl, "declare", "--node", "web-1", "--file", body, "--timeout", "5s", "--data", cp.Dir).Output()
			cancel()
			if m := acknowlege.FindStringSubmatch(string(out)); m != nil {
				v, _ := strconv.ParseUint(m[1], 10, 64)
				mu.Lock()
				if v > ackedVer {
					ackedVer, ackedTry = v, i
				}
				mu.Unlock()
			} else {
				time.Sleep(100 * time.Millisecond) // serve is down: do not spin
			}
		}
	}()

	rng := rand.New(rand.NewPCG(5, 6))
	var persisted uint64
	for i := range 6 {
		time.Sleep(time.Duration(400+rng.IntN(800)) * time.Millisecond)
		which := rng.IntN(3) // 0 serve, 1 the agent, 2 both
		if which != 1 {
			mu.Lock()
			acked := ackedVer
			mu.Unlock()
			cp.Process().Kill()
			cp.Serve()
			// A snapshot the kill interrupted is removed when the store opens.
			if m, _ := filepath.Glob(filepath.Join(cp.Dir, "raft", "snapshots", "*.tmp")); len(m) > 0 {
				t.Fatalf("kill %d: unfinished snapshots left after the restart: %v", i, m)
			}
			if n, ok := cp.Node("web-1"); !ok || n.Declared < acked {
				t.Fatalf("kill %d: after the restart web-1 is declared v%d, but serve had acknowledged v%d", i, n.Declared, acked)
			}
		}
		if which != 0 {
			agent.Kill()
			checkNoTornFiles(t, h.State, fmt.Sprintf("after SIGKILL %d", i))
			seq := appliedSequence(t, agent.Output())
			strictlyIncreasing(t, seq)
			if len(seq) > 0 && seq[0] <= persisted {
				t.Fatalf("kill %d: the agent applied v%d again or below v%d it had persisted before", i, seq[0], persisted)
			}
			a, err := state.Load(h.State)
			if err != nil {
				t.Fatal(err)
			}
			if a.Version < persisted {
				t.Fatalf("kill %d: the applied version went back from v%d to v%d", i, persisted, a.Version)
			}
			persisted = a.Version
			agent = runAgent()
		}
	}
	stop.Store(true)
	<-done
	select {
	case err := <-failed:
		t.Fatalf("the declarations' writer: %v", err)
	default:
	}

	n, ok := cp.Node("web-1")
	if !ok {
		t.Fatal("web-1 is not among the nodes")
	}
	mu.Lock()
	acked, try := ackedVer, ackedTry
	mu.Unlock()
	if acked == 0 {
		t.Fatal("no declaration was acknowledged: nothing was tested")
	}
	if n.Declared < acked {
		t.Fatalf("web-1 declared v%d, below v%d serve acknowledged", n.Declared, acked)
	}
	cp.WaitConverged("web-1", n.Declared, 60*time.Second)
	got, err := h.ReadManaged("app.conf")
	if err != nil {
		t.Fatal(err)
	}
	m := attemptRE.FindStringSubmatch(got)
	if m == nil || len(m[2]) != pad {
		t.Fatalf("app.conf is not a whole declared file (%d bytes): %.40q", len(got), got)
	}
	if a, _ := strconv.Atoi(m[1]); a < try {
		t.Fatalf("app.conf holds attempt %d, older than attempt %d acknowledged as v%d", a, try, acked)
	}
	// The hooks owed across the kills ran, the last after the last change.
	harness.Eventually(t, 30*time.Second, "the hook ran on the final content", func() bool {
		data, _ := os.ReadFile(hookLog)
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		return lines[len(lines)-1] == "attempt "+m[1]
	})
	if seq := appliedSequence(t, agent.Output()); len(seq) > 0 && seq[0] <= persisted {
		t.Fatalf("the last run applied v%d again or below v%d persisted", seq[0], persisted)
	}
	t.Logf("six kills; %d acknowledged as v%d; converged on v%d", try, acked, n.Declared)
}
