package fleet

import (
	"testing"
	"time"
)

func TestSummarise(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	got := Summarise(ds)
	want := Latency{N: 100, MinMs: 1, P50Ms: 50, P99Ms: 99, MaxMs: 100}
	if got != want {
		t.Fatalf("Summarise(1..100 ms) = %+v, want %+v", got, want)
	}
	if got := Summarise(nil); got != (Latency{}) {
		t.Fatalf("Summarise(nil) = %+v", got)
	}
	if got := Summarise([]time.Duration{3 * time.Millisecond}); got.P50Ms != 3 || got.P99Ms != 3 || got.MaxMs != 3 {
		t.Fatalf("one value: %+v", got)
	}
}

func TestParseStatCPU(t *testing.T) {
	// A command name with a space and a parenthesis; utime 250, stime 50 ticks.
	line := "1234 (my (cmd) x) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 12 0 999 100000 200 18446744073709551615\n"
	got, err := parseStatCPU([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if got != 3*time.Second {
		t.Fatalf("cpu = %s, want 3s", got)
	}
	if _, err := parseStatCPU([]byte("1234 (x) S 1")); err == nil {
		t.Fatal("a short line parsed")
	}
}

func TestParseVmRSS(t *testing.T) {
	status := "Name:\tmeshctl\nVmPeak:\t  900 kB\nVmRSS:\t   2048 kB\nThreads:\t9\n"
	got, err := parseVmRSS([]byte(status))
	if err != nil || got != 2048<<10 {
		t.Fatalf("rss = %d, %v", got, err)
	}
	if _, err := parseVmRSS([]byte("Name:\tx\n")); err == nil {
		t.Fatal("no VmRSS line parsed")
	}
}

func TestSelfCPUAndProc(t *testing.T) {
	self, err := SelfCPU()
	if err != nil || self <= 0 {
		t.Fatalf("SelfCPU = %s, %v", self, err)
	}
	if _, err := ProcCPU(1 << 30); err == nil {
		t.Fatal("a process that does not exist has a CPU time")
	}
}

func TestTextField(t *testing.T) {
	line := `time=2026-12-01T10:00:00.000Z level=WARN msg="status reports not committed; they will be reported again" nodes=12 err="a b"`
	if got := textField(line, "level"); got != "WARN" {
		t.Fatalf("level = %q", got)
	}
	if got := textField(line, "msg"); got != "status reports not committed; they will be reported again" {
		t.Fatalf("msg = %q", got)
	}
	if got := textField(line, "nodes"); got != "12" {
		t.Fatalf("nodes = %q", got)
	}
	if got := textField(line, "missing"); got != "" {
		t.Fatalf("missing = %q", got)
	}
}

func TestLogTally(t *testing.T) {
	var tl logTally
	tl.add("WARN", "b")
	tl.add("WARN", "a")
	tl.add("WARN", "a")
	got := tl.list()
	if len(got) != 2 || got[0] != (LogCount{"WARN", "a", 2}) || got[1] != (LogCount{"WARN", "b", 1}) {
		t.Fatalf("list = %+v", got)
	}
}

func TestUntimed(t *testing.T) {
	if got := untimed("2026-12-01T10:23:33.163Z [WARN]  raft: heartbeat timeout reached"); got != "[WARN]  raft: heartbeat timeout reached" {
		t.Fatalf("untimed = %q", got)
	}
	if got := untimed("node revoked"); got != "node revoked" {
		t.Fatalf("untimed = %q", got)
	}
}

func TestParseMachineBusy(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice
	stat := "cpu  100 10 50 9999 77 5 5 30 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n"
	got, err := parseMachineBusy([]byte(stat))
	if err != nil || got != 2*time.Second {
		t.Fatalf("busy = %s, %v; want 2s (200 ticks)", got, err)
	}
}

func TestDisturbed(t *testing.T) {
	quiet := Phase{CPUMs: map[string]float64{"serve": 2000, "bench": 3000, otherCPU: 150}}
	busy := Phase{CPUMs: map[string]float64{"serve": 2000, "bench": 3000, otherCPU: 1500}}
	small := Phase{CPUMs: map[string]float64{"serve": 100, otherCPU: 100}}
	if disturbed(quiet) || !disturbed(busy) || disturbed(small) {
		t.Fatalf("disturbed: quiet %t busy %t small %t", disturbed(quiet), disturbed(busy), disturbed(small))
	}
}

func TestMedianP99(t *testing.T) {
	for _, c := range []struct {
		p99  []float64
		want float64
	}{
		{nil, 0},
		{[]float64{7}, 7},
		{[]float64{190, 35, 150}, 150}, // one slow round does not decide it
		{[]float64{40, 10, 30, 20}, 20},
	} {
		var ls []Latency
		for _, p := range c.p99 {
			ls = append(ls, Latency{P99Ms: p})
		}
		if got := medianP99(ls); got != c.want {
			t.Errorf("medianP99(%v) = %v, want %v", c.p99, got, c.want)
		}
	}
}
