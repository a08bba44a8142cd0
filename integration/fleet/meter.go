package fleet

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"runtime"
	"time"
)

// Phase is one timed phase: its wall time and the CPU time (user+system) each
// process spent in it.
type Phase struct {
	Name   string             `json:"name"`
	WallMs float64            `json:"wall_ms"`
	CPUMs  map[string]float64 `json:"cpu_ms"`
	// Probe is the machine's speed through the phase (see sampleSpeed): a phase
	// whose figures moved between runs of the same code while its probe moved with
	// them ran on a slower machine, not slower code.
	Probe Probe `json:"probe"`
	// CollectedMs is the CPU time of the garbage collection this process ran just
	// before the phase began, not part of the phase's figures (see collect).
	CollectedMs float64 `json:"collected_before_ms"`
	// ServeGC is what serve's collector did in the phase, when its /metrics could
	// be read at both ends (nil otherwise, and for the baseline).
	ServeGC *GCUse `json:"serve_gc,omitempty"`
}

// GCUse is what a process's garbage collector did in a phase: how many collections
// it ran and how much the process allocated. At 10,000 hosts one collection of
// serve's is most of a second of CPU, so a round that holds one costs serve about
// twice what a round without one does: this says which rounds did.
type GCUse struct {
	Collections  int     `json:"collections"`
	AllocatedMiB float64 `json:"allocated_mib"`
}

// Wall is the phase's wall time.
func (p Phase) Wall() time.Duration { return time.Duration(p.WallMs * float64(time.Millisecond)) }

// CPU is the CPU time process name spent in the phase.
func (p Phase) CPU(name string) time.Duration {
	return time.Duration(p.CPUMs[name] * float64(time.Millisecond))
}

// cpuSource is a process a phase is charged with: its name and a reading of the CPU
// time it has used so far.
type cpuSource struct {
	name string
	read func() (time.Duration, error)
}

// otherCPU is the name under which a phase records the CPU time the machine spent
// outside the processes it is charged with: other processes (a test run by
// someone else, the kernel's own work). A phase with much of it was disturbed.
const otherCPU = "other"

// meter times phases against a fixed set of processes and keeps every phase it
// timed, in order. The machine's busy time is read too, to record otherCPU.
type meter struct {
	sources []cpuSource
	// self names the source that is this process, which runs the speed probes and
	// is not charged with them.
	self   string
	out    io.Writer // progress lines
	phases []Phase
	// prof, when set, profiles the phases it matches.
	prof *profiler
	// serveGC, when set, reads serve's collector's counters (from its /metrics).
	serveGC func() gcCounters
}

// machine reads the whole machine's busy CPU time.
func machine() cpuSource { return cpuSource{name: "machine", read: MachineBusy} }

// span is a phase in progress.
type span struct {
	m     *meter
	name  string
	start time.Time
	cpu   []time.Duration
	prof  *phaseProfile
	// stopProbe ends the phase's sampleSpeed, which sends on probe.
	stopProbe chan struct{}
	probe     chan Probe
	// collected is the CPU time of the collection before the phase.
	collected time.Duration
	// gc is serve's collector's counters at the phase's start.
	gc gcCounters
}

// probeSpeed measures how fast the machine does a fixed piece of work now: one
// Ed25519 verification, the fastest of five batches of five, in µs, on the calling
// goroutine (1.5–3 ms), and how long the probe took. Batches this short are rarely
// cut by the scheduler, so a phase that keeps both cores busy still reads the
// machine's speed, not its queue.
func probeSpeed(pub ed25519.PublicKey, msg, sig []byte) (float64, time.Duration) {
	begin := time.Now()
	best := time.Duration(1<<63 - 1)
	for range 5 {
		start := time.Now()
		for range 5 {
			ed25519.Verify(pub, msg, sig)
		}
		best = min(best, time.Since(start))
	}
	return float64(best) / 5 / float64(time.Microsecond), time.Since(begin)
}

// probeEvery is how often a phase probes the machine's speed.
const probeEvery = 500 * time.Millisecond

// sampleSpeed probes the machine's speed at once, every probeEvery, and once more
// when stop is closed, and sends what it saw. This machine is shared: the same
// verification takes 51 µs one second and 80 µs the next, and the CPU time per host
// of the same code moves by a quarter between runs. A phase's probes say at which
// speed it ran.
func sampleSpeed(stop <-chan struct{}, out chan<- Probe) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	msg := make([]byte, 600) // about a declaration's envelope
	sig := ed25519.Sign(priv, msg)
	var p Probe
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	for {
		us, took := probeSpeed(pub, msg, sig)
		p.add(us, took)
		select {
		case <-stop:
			us, took := probeSpeed(pub, msg, sig) // the speed at the phase's end
			p.add(us, took)
			out <- p
			return
		case <-t.C:
		}
	}
}

// Probe is what a phase's probes of the machine's speed saw: the mean, fastest and
// slowest of N probes, each one Ed25519 verification in µs. CostMs is their CPU time,
// which is taken off the CPU of the process that ran them.
type Probe struct {
	N      int     `json:"n"`
	MeanUs float64 `json:"mean_us"`
	MinUs  float64 `json:"min_us"`
	MaxUs  float64 `json:"max_us"`
	CostMs float64 `json:"cost_ms"`
}

func (p *Probe) add(us float64, took time.Duration) {
	if p.N == 0 || us < p.MinUs {
		p.MinUs = us
	}
	p.MaxUs = max(p.MaxUs, us)
	p.MeanUs = (p.MeanUs*float64(p.N) + us) / float64(p.N+1)
	p.N++
	p.CostMs += ms(took)
}

// collect collects this process's garbage and returns the CPU time it took. Every
// phase starts after one. The agents share this process and its heap, 10,000 of
// them about 750 MB, so one collection costs 0.34–1.2 s of CPU. Without it, the
// collector runs in whichever phase tips the heap over its goal, mostly with the
// benchmark's own garbage (its checks of every host after a round allocate about
// 2.4 times what the agents allocate in the round), and charges the agents of that
// phase over 100 µs per host that a real host, one agent in a heap of a few MB,
// never pays. The cost is printed beside the phase, not hidden.
func collect() time.Duration {
	before, err1 := SelfCPU()
	runtime.GC()
	after, err2 := SelfCPU()
	if err1 != nil || err2 != nil {
		return 0
	}
	return after - before
}

// begin collects this process's garbage (see collect), then starts timing a phase
// and prints a progress line.
func (m *meter) begin(name string) *span { return m.start(name, true, true) }

// beginAsIs starts timing a phase without collecting first, for a phase that goes on
// timing something already under way (the convergence after a kill -9), where a
// collection would fall inside what is measured; nor does it read serve's collector
// counters, a scrape that, with the fleet reconnecting, took a second or more.
func (m *meter) beginAsIs(name string) *span { return m.start(name, false, false) }

// start starts timing a phase, collecting this process's garbage first and reading
// serve's collector counters when told to.
func (m *meter) start(name string, collecting, scraping bool) *span {
	fmt.Fprintf(m.out, "== %s\n", name)
	var collected time.Duration
	if collecting {
		collected = collect()
	}
	s := &span{collected: collected, m: m, name: name, cpu: make([]time.Duration, len(m.sources)+1), stopProbe: make(chan struct{}), probe: make(chan Probe, 1)}
	for i, src := range m.sources {
		s.cpu[i] = m.reading(src)
	}
	s.cpu[len(m.sources)] = m.reading(machine())
	if scraping {
		// Not in a phase begun as is: the profiler collects serve's garbage twice
		// and starts its profile, which after a kill -9 fell between the API's
		// answer and the declaration (a review).
		s.prof = m.prof.begin(name)
	}
	if m.serveGC != nil && scraping {
		// After the profiler's own collections, which are not the phase's. The
		// scrape costs serve about a millisecond of the phase's CPU.
		s.gc = m.serveGC()
	}
	s.start = time.Now()
	go sampleSpeed(s.stopProbe, s.probe)
	return s
}

// serveRestarted tells the span that serve was restarted within it: its collector
// counters began again, and end does not read them (a scrape of a serve the whole
// fleet is reconnecting to held up what came next by a second or more).
func (s *span) serveRestarted() { s.gc.ok = false }

// end stops the phase, records it and prints what it cost.
func (s *span) end() Phase {
	wall := time.Since(s.start)
	close(s.stopProbe)
	probe := <-s.probe
	// The probes ran in this process: neither it (the source named self) nor the
	// machine's other work is charged with them.
	probeCost := time.Duration(probe.CostMs * float64(time.Millisecond))
	p := Phase{Name: s.name, WallMs: ms(wall), CPUMs: map[string]float64{}, CollectedMs: ms(s.collected)}
	line := fmt.Sprintf("   %s: %s wall", s.name, wall.Round(time.Millisecond))
	var known time.Duration
	for i, src := range s.m.sources {
		d := s.m.reading(src) - s.cpu[i]
		if src.name == s.m.self {
			d = max(0, d-probeCost)
		}
		known += d
		p.CPUMs[src.name] = ms(d)
		line += fmt.Sprintf(", %s %s CPU", src.name, d.Round(time.Millisecond))
	}
	other := s.m.reading(machine()) - s.cpu[len(s.m.sources)] - known
	if s.m.self == "" {
		other -= probeCost
	}
	other = max(0, other)
	p.CPUMs[otherCPU] = ms(other)
	line += fmt.Sprintf(", other %s CPU", other.Round(time.Millisecond))
	if s.m.serveGC != nil && s.gc.ok {
		// Before the profiler's end, whose collections are not the phase's.
		switch now := s.m.serveGC(); {
		case !now.ok:
		case now.allocated < s.gc.allocated:
			line += "; serve restarted: its collections not counted"
		default:
			p.ServeGC = &GCUse{Collections: int(now.cycles - s.gc.cycles), AllocatedMiB: (now.allocated - s.gc.allocated) / (1 << 20)}
			line += fmt.Sprintf("; serve collected %d times, allocated %.1f MiB", p.ServeGC.Collections, p.ServeGC.AllocatedMiB)
		}
	}
	s.prof.end()
	p.Probe = probe
	line += fmt.Sprintf("; machine probe %.1f µs (%.1f–%.1f, %d); collected before it %s CPU", probe.MeanUs, probe.MinUs, probe.MaxUs, probe.N, s.collected.Round(time.Millisecond))
	fmt.Fprintln(s.m.out, line)
	s.m.phases = append(s.m.phases, p)
	return p
}

// reading reads a source; a process that cannot be read (it has just died) reads as
// zero, and says so.
func (m *meter) reading(src cpuSource) time.Duration {
	d, err := src.read()
	if err != nil {
		fmt.Fprintf(m.out, "   (CPU time of %s unreadable: %v)\n", src.name, err)
		return 0
	}
	return d
}

// IdleResult is the fleet connected with nothing to do for a while: what a mesh at
// rest costs (the clients' pings, the agents' heartbeats, the server's answers).
type IdleResult struct {
	Connected int `json:"connected"`
	// ServerUsPerHostSecond and ClientUsPerHostSecond are CPU microseconds per
	// connected host per second of the phase, of the server's process and of this
	// one (the agents, or the baseline's subscribers).
	ServerUsPerHostSecond float64 `json:"server_us_per_host_second"`
	ClientUsPerHostSecond float64 `json:"client_us_per_host_second"`
	Phase                 Phase   `json:"phase"`
}

// idle waits d with connected hosts and nothing sent, and returns what the server
// (the meter's source named server) and this process spent per host per second.
func (m *meter) idle(ctx context.Context, name string, d time.Duration, connected int, server string) (IdleResult, error) {
	sp := m.begin(name)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	res := IdleResult{Connected: connected, Phase: sp.end()}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	perHostSecond := func(cpu time.Duration) float64 {
		if connected == 0 {
			return 0
		}
		return us(cpu) / float64(connected) / res.Phase.Wall().Seconds()
	}
	res.ServerUsPerHostSecond = perHostSecond(res.Phase.CPU(server))
	res.ClientUsPerHostSecond = perHostSecond(res.Phase.CPU(m.self))
	fmt.Fprintf(m.out, "   %d connected at rest: %s %.2f µs CPU per host per second, %s %.2f\n",
		connected, server, res.ServerUsPerHostSecond, m.self, res.ClientUsPerHostSecond)
	return res, nil
}
