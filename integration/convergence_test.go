package integration

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"mesh/integration/harness"
)

var declaredRE = regexp.MustCompile(`declared web-1 v(\d+)`)

// appliedSequence is the versions an agent's log says it applied, in order.
func appliedSequence(t *testing.T, log string) []uint64 {
	t.Helper()
	var out []uint64
	for _, v := range harness.AppliedVersions(log) {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("version %q in the agent log", v)
		}
		out = append(out, n)
	}
	return out
}

// strictlyIncreasing fails if any version was applied twice or after a newer one.
func strictlyIncreasing(t *testing.T, seq []uint64) {
	t.Helper()
	for i := 1; i < len(seq); i++ {
		if seq[i] <= seq[i-1] {
			t.Fatalf("applied v%d after v%d: %v", seq[i], seq[i-1], seq)
		}
	}
}

// TestKillDuringDeclarationBurst: the control plane is killed with SIGKILL during a
// burst of declarations. After it restarts, every declaration `meshctl declare`
// reported as accepted is delivered; the host ends on the newest; none was applied
// twice or after a newer one.
func TestKillDuringDeclarationBurst(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "burst")
	serve := cp.Serve()
	h := harness.NewHost(t, bin, "web-1")
	if r := h.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	agent := h.Run()

	dir := t.TempDir()
	var (
		mu       sync.Mutex
		accepted = map[uint64]string{} // version -> content
		wg       sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 1; i <= 40; i++ {
			content := fmt.Sprintf("burst %d", i)
			file := filepath.Join(dir, fmt.Sprintf("b%d.json", i))
			writeFile(t, file, `{"files":[{"path":"state","content":"`+content+`"}]}`)
			// No leader wait: once the control node is killed, each of the rest
			// fails at once (refused) rather than wait for one that is not restarted
			// until the burst ends.
			r := cp.Ctl("declare", "--node", "web-1", "--file", file, "--leader-wait", "0")
			if m := declaredRE.FindStringSubmatch(r.Stdout); r.Code == 0 && m != nil {
				v, _ := strconv.ParseUint(m[1], 10, 64)
				mu.Lock()
				accepted[v] = content
				mu.Unlock()
			}
		}
	}()
	harness.Eventually(t, 20*time.Second, "a few declarations accepted", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(accepted) >= 5
	})
	serve.Kill()
	wg.Wait()

	mu.Lock()
	var newest uint64
	for v := range accepted {
		newest = max(newest, v)
	}
	n := len(accepted)
	mu.Unlock()
	if n == 40 {
		t.Fatal("the kill landed after the burst: nothing was tested")
	}
	t.Logf("%d declarations accepted before the kill; newest v%d", n, newest)

	cp.Serve()
	view, ok := cp.Node("web-1")
	if !ok || view.Declared < newest {
		t.Fatalf("after restart web-1 is declared v%d; v%d was reported accepted", view.Declared, newest)
	}
	// A declaration cut off by the kill may have committed without being reported:
	// the host must end on whatever the mesh holds, which is at least the newest
	// reported one.
	cp.WaitConverged("web-1", view.Declared, 30*time.Second)
	if got, _ := h.ReadManaged("state"); view.Declared == newest && got != accepted[newest] {
		t.Fatalf("state = %q, want %q", got, accepted[newest])
	}
	seq := appliedSequence(t, agent.Output())
	strictlyIncreasing(t, seq)
	if seq[len(seq)-1] != view.Declared {
		t.Fatalf("last applied v%d, declared v%d", seq[len(seq)-1], view.Declared)
	}
}

// TestPartitionConvergesToNewest: the host is cut off from the broker while five
// declarations are issued; after the heal it converges to the newest in one step,
// never applying an older one after a newer one. Then its connection is reset, and it
// converges again.
func TestPartitionConvergesToNewest(t *testing.T) {
	t.Parallel()
	cp, proxy := harness.NewControlPlaneBehindProxy(t, bin, "partition")
	cp.Serve()
	h := harness.NewHost(t, bin, "web-1")
	if r := h.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	agent := h.Run()
	body := filepath.Join(t.TempDir(), "b.json")
	writeFile(t, body, `{"files":[{"path":"state","content":"before"}]}`)
	cp.Ctl("declare", "--node", "web-1", "--file", body)
	cp.WaitConverged("web-1", 1, 20*time.Second)

	proxy.Partition()
	for i := 2; i <= 6; i++ {
		writeFile(t, body, fmt.Sprintf(`{"files":[{"path":"state","content":"during %d"}]}`, i))
		if r := cp.Ctl("declare", "--node", "web-1", "--file", body); r.Code != 0 {
			t.Fatalf("declare during the partition: %s", r.Combined())
		}
	}
	time.Sleep(2 * time.Second)
	if got, _ := h.ReadManaged("state"); got != "before" {
		t.Fatalf("a declaration crossed the partition: state = %q", got)
	}
	before := len(appliedSequence(t, agent.Output()))
	proxy.Heal()
	cp.WaitConverged("web-1", 6, 30*time.Second)
	if got, _ := h.ReadManaged("state"); got != "during 6" {
		t.Fatalf("after the heal state = %q", got)
	}
	seq := appliedSequence(t, agent.Output())
	strictlyIncreasing(t, seq)
	if after := seq[before:]; len(after) != 1 || after[0] != 6 {
		t.Fatalf("after the heal the agent applied %v, want exactly [6] (the newest, in one step)\n%s", after, agent.Output())
	}
	if !strings.Contains(agent.Output(), "disconnected") {
		t.Fatalf("the agent never noticed the partition:\n%s", agent.Output())
	}
	// Connections reset (RST) on the path: the agent reconnects and converges.
	proxy.ResetAll()
	writeFile(t, body, `{"files":[{"path":"state","content":"after a reset"}]}`)
	if r := cp.Ctl("declare", "--node", "web-1", "--file", body); r.Code != 0 {
		t.Fatalf("declare after the reset: %s", r.Combined())
	}
	cp.WaitConverged("web-1", 7, 30*time.Second)
	strictlyIncreasing(t, appliedSequence(t, agent.Output()))
}
