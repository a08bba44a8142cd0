package fleet

import (
	"context"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The report warns when the machine's speed moved between phases by more than a
// steady machine's spread, and not otherwise.
func TestReportWarnsOfAChangingMachine(t *testing.T) {
	report := func(probes ...float64) string {
		r := &Report{Product: &ProductResult{}, Baseline: &BaselineResult{}}
		for i, p := range probes {
			n := minProbes
			if p < 0 { // a short phase, whose few probes do not count
				p, n = -p, minProbes-1
			}
			ph := Phase{Name: "phase", CPUMs: map[string]float64{}, Probe: Probe{N: n, MeanUs: p, MinUs: p - 1, MaxUs: p + 2}}
			if i == 0 {
				r.Baseline.Phases = append(r.Baseline.Phases, ph)
			} else {
				r.Product.Phases = append(r.Product.Phases, ph)
			}
		}
		var b strings.Builder
		r.Print(&b)
		return b.String()
	}
	if out := report(60, 62, 66, -90); strings.Contains(out, "speed changed") {
		t.Fatalf("a steady machine was reported as changing:\n%s", out)
	}
	out := report(60, 62, 75)
	if !strings.Contains(out, "took 60.0 µs on average in one phase and 75.0 in another") {
		t.Fatalf("a machine whose probe moved from 60 to 75 µs was not reported:\n%s", out)
	}
	if !strings.Contains(out, "75 (74–77)") {
		t.Fatalf("the phase table does not show the probe:\n%s", out)
	}
}

// A phase's probes run through it and are not charged to the process running them.
func TestPhaseProbesTheMachine(t *testing.T) {
	// A machine that charges a sleeping process CPU (some virtual machines charge
	// each a few ms a second, a Python sleep as much as this one) hides what the
	// probes cost in that noise, and the check below cannot tell the two apart.
	before, err := SelfCPU()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(3*probeEvery/2 + probeEvery/4)
	if after, _ := SelfCPU(); after-before > 2*time.Millisecond {
		t.Skipf("this machine charged this process %s of CPU while it slept %s: the probes' cost (a few ms) cannot be told from that", after-before, 3*probeEvery/2+probeEvery/4)
	}
	var out strings.Builder
	m := &meter{out: &out, self: "bench", sources: []cpuSource{{"bench", SelfCPU}}}
	s := m.begin("idle")
	time.Sleep(3*probeEvery/2 + probeEvery/4)
	p := s.end()
	if p.Probe.N < 3 || p.Probe.MinUs <= 1 || p.Probe.MaxUs < p.Probe.MinUs || p.Probe.MeanUs < p.Probe.MinUs || p.Probe.MeanUs > p.Probe.MaxUs {
		t.Fatalf("probe %+v: want at least 3 probes with min ≤ mean ≤ max", p.Probe)
	}
	if p.Probe.CostMs <= 0 {
		t.Fatalf("the probes cost nothing: %+v", p.Probe)
	}
	// The phase slept: what is left of the process's CPU once the probes are taken
	// off is far below what they cost.
	if p.CPUMs["bench"] >= p.Probe.CostMs {
		// Unless the machine turned noisy meanwhile (other packages' tests beside
		// this one): asked again as at the start, it says so, and the check cannot
		// judge. On a quiet machine it still fails.
		before, _ := SelfCPU()
		time.Sleep(3*probeEvery/2 + probeEvery/4)
		if after, _ := SelfCPU(); after-before > 2*time.Millisecond {
			t.Skipf("this machine charged this process %s of CPU while it slept, after the phase: the probes' cost (%.1f ms) cannot be told from that", after-before, p.Probe.CostMs)
		}
		t.Fatalf("bench charged %.1f ms for a phase that slept while probes took %.1f ms", p.CPUMs["bench"], p.Probe.CostMs)
	}
}

// A phase begins after a collection of this process's garbage, outside its figures;
// a phase begun as is runs none, so that nothing falls inside an interval already
// being timed.
func TestPhaseBeginsAfterACollection(t *testing.T) {
	var out strings.Builder
	m := &meter{out: &out, self: "bench", sources: []cpuSource{{"bench", SelfCPU}}}
	var before, after runtime.MemStats

	runtime.ReadMemStats(&before)
	s := m.begin("collected")
	runtime.ReadMemStats(&after)
	p := s.end()
	if after.NumForcedGC <= before.NumForcedGC {
		t.Fatalf("begin ran no collection (forced collections %d before, %d after)", before.NumForcedGC, after.NumForcedGC)
	}
	if p.CollectedMs < 0 || !strings.Contains(out.String(), "collected before it") {
		t.Fatalf("the collection's cost is not reported: %+v\n%s", p, out.String())
	}

	runtime.ReadMemStats(&before)
	s = m.beginAsIs("as is")
	runtime.ReadMemStats(&after)
	p = s.end()
	if after.NumForcedGC != before.NumForcedGC || p.CollectedMs != 0 {
		t.Fatalf("beginAsIs collected (forced collections %d before, %d after; %.1f ms recorded)", before.NumForcedGC, after.NumForcedGC, p.CollectedMs)
	}
}

// TestIdleChargesPerHostSecond: the idle phase divides what the server's process
// spent by the hosts connected and the seconds waited.
func TestIdleChargesPerHostSecond(t *testing.T) {
	var out strings.Builder
	var server atomic.Int64
	m := &meter{out: &out, self: "bench", sources: []cpuSource{
		{"srv", func() (time.Duration, error) { return time.Duration(server.Load()), nil }},
		{"bench", SelfCPU},
	}}
	go func() { time.Sleep(100 * time.Millisecond); server.Store(int64(2 * time.Second)) }()
	r, err := m.idle(context.Background(), "idle", 400*time.Millisecond, 10, "srv")
	if err != nil {
		t.Fatal(err)
	}
	// 2 s of CPU over 10 hosts and about 0.4 s: about 500,000 µs per host per second.
	want := 2e6 / 10 / r.Phase.Wall().Seconds()
	if r.Connected != 10 || r.ServerUsPerHostSecond < want*0.999 || r.ServerUsPerHostSecond > want*1.001 {
		t.Fatalf("%+v: want %.0f µs per host per second for the server", r, want)
	}
	if !strings.Contains(out.String(), "at rest: srv") {
		t.Fatalf("no line for the phase:\n%s", out.String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.idle(ctx, "cancelled", time.Hour, 10, "srv"); err == nil {
		t.Fatal("a cancelled idle phase returned no error")
	}
}

// A phase records what serve's collector did in it, read from a real /metrics (this
// process's Go collector stands for serve's), and leaves it out when it cannot tell:
// serve restarted in the phase, or its /metrics did not answer.
func TestPhaseCountsServeCollections(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")

	var out strings.Builder
	m := &meter{out: &out, self: "bench", sources: []cpuSource{{"bench", SelfCPU}},
		serveGC: func() gcCounters { return readGC(addr) }}
	s := m.start("two collections", false, true)
	var keep [][]byte
	for range 16 {
		keep = append(keep, make([]byte, 1<<20))
	}
	runtime.GC()
	runtime.GC()
	p := s.end()
	runtime.KeepAlive(keep)
	if p.ServeGC == nil || p.ServeGC.Collections < 2 || p.ServeGC.AllocatedMiB < 16 {
		t.Fatalf("serve GC %+v, want at least 2 collections and 16 MiB\n%s", p.ServeGC, out.String())
	}
	if !strings.Contains(out.String(), "; serve collected") {
		t.Fatalf("the phase line does not say what serve collected:\n%s", out.String())
	}

	readings := []gcCounters{{allocated: 100, cycles: 5, ok: true}, {allocated: 10, cycles: 1, ok: true}}
	m.serveGC = func() gcCounters { r := readings[0]; readings = readings[1:]; return r }
	if p := m.start("restarted", false, true).end(); p.ServeGC != nil || !strings.Contains(out.String(), "serve restarted") {
		t.Fatalf("a restart in the phase gave %+v\n%s", p.ServeGC, out.String())
	}
	m.serveGC = func() gcCounters { return gcCounters{} }
	if p := m.start("unreadable", false, true).end(); p.ServeGC != nil {
		t.Fatalf("an unreadable /metrics gave %+v", p.ServeGC)
	}
	var table strings.Builder
	printProduct(&table, Config{}, &ProductResult{Phases: []Phase{{Name: "read", CPUMs: map[string]float64{}, ServeGC: &GCUse{Collections: 3}}, {Name: "unread", CPUMs: map[string]float64{}}}})
	if !strings.Contains(table.String(), "serve GCs") {
		t.Fatalf("the phase table has no serve GCs column:\n%s", table.String())
	}
}
