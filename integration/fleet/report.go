package fleet

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Report is every figure of a run.
type Report struct {
	Date     string          `json:"date"`
	Machine  Machine         `json:"machine"`
	Config   Config          `json:"config"`
	Product  *ProductResult  `json:"product,omitempty"`
	Baseline *BaselineResult `json:"baseline,omitempty"`
	Ratios   []Ratio         `json:"ratios,omitempty"`
	// Goals are the run's figures judged against the fleet's targets.
	Goals []Goal `json:"goals,omitempty"`
	// Failures is every failure the run counted, product and baseline; a run is
	// clean when it is zero.
	Failures int `json:"failures"`
	// Disturbed names the phases during which the machine spent notable CPU time
	// outside the measured processes (see otherCPU): their figures are not this
	// code's alone.
	Disturbed []string `json:"disturbed,omitempty"`
}

// disturbed reports whether other processes took a notable share of the machine
// during p: more than 10% of the measured processes' CPU and more than 200 ms.
func disturbed(p Phase) bool {
	var known float64
	for name, v := range p.CPUMs {
		if name != otherCPU {
			known += v
		}
	}
	other := p.CPUMs[otherCPU]
	return other > 200 && other > known/10
}

// probeSpread is how far the machine probe may move within a run before the report
// warns: the fastest batch of a probe varies by a few percent on a steady machine.
const probeSpread = 1.15

// minProbes is how many probes a phase needs (about 1.5 s) for its mean to count in
// probeRange: the speed moves within a second, so one or two probes say little.
const minProbes = 4

// probeRange returns the fastest and slowest mean machine probe of the run's phases
// long enough to have minProbes.
func (r *Report) probeRange() (lo, hi float64) {
	var phases []Phase
	if r.Baseline != nil {
		phases = append(phases, r.Baseline.Phases...)
	}
	if r.Product != nil {
		phases = append(phases, r.Product.Phases...)
	}
	for _, p := range phases {
		if v := p.Probe.MeanUs; v > 0 && p.Probe.N >= minProbes {
			if lo == 0 || v < lo {
				lo = v
			}
			hi = max(hi, v)
		}
	}
	return lo, hi
}

func probeText(p Phase) string {
	if p.Probe.N == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f (%.0f–%.0f)", p.Probe.MeanUs, p.Probe.MinUs, p.Probe.MaxUs)
}

// disturbedPhases lists the disturbed phases of the run.
func (r *Report) disturbedPhases() []string {
	var phases []Phase
	if r.Baseline != nil {
		phases = append(phases, r.Baseline.Phases...)
	}
	if r.Product != nil {
		phases = append(phases, r.Product.Phases...)
	}
	var out []string
	for _, p := range phases {
		if disturbed(p) {
			out = append(out, fmt.Sprintf("%s (other CPU %.2f s)", p.Name, p.CPUMs[otherCPU]/1000))
		}
	}
	return out
}

// Machine describes where the run happened.
type Machine struct {
	Cores     int    `json:"cores"`
	CPU       string `json:"cpu"`
	GoVersion string `json:"go_version"`
	OS        string `json:"os"`
	NoFile    uint64 `json:"rlimit_nofile"`
}

func thisMachine(nofile uint64) Machine {
	return Machine{Cores: runtime.NumCPU(), CPU: cpuModel(), GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH, NoFile: nofile}
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// Ratio is one of the product's figures beside the baseline's.
type Ratio struct {
	Name     string  `json:"name"`
	Unit     string  `json:"unit"`
	Product  float64 `json:"product"`
	Baseline float64 `json:"baseline"`
	Ratio    float64 `json:"ratio"` // product / baseline
}

// ratios sets the product's figures beside the baseline's.
func ratios(p *ProductResult, b *BaselineResult) []Ratio {
	if p == nil || b == nil {
		return nil
	}
	r := func(name, unit string, prod, base float64) Ratio {
		return Ratio{Name: name, Unit: unit, Product: prod, Baseline: base, Ratio: ratio(prod, base)}
	}
	connect := b.Connect.Phase.WallMs
	enrolCPU := us(perUnit(p.Enrol.Phase.CPU("serve"), p.Enrol.Enrolled))
	startCPU := us(perUnit(p.Start.Phase.CPU("serve"), p.Start.Started))
	return []Ratio{
		r("enrol all vs connect all", "s", p.Enrol.Phase.WallMs/1000, connect/1000),
		r("start until all alive vs connect all", "s", p.Start.AllAliveMs/1000, connect/1000),
		r("server CPU per host: enrol vs connect", "µs", enrolCPU, b.Connect.ServerCPUPerUs),
		r("server CPU per host: agent start vs connect", "µs", startCPU, b.Connect.ServerCPUPerUs),
		r("fan-out p50", "ms", p.Fanout.P50Ms, b.Fanout.P50Ms),
		r("fan-out p99", "ms", p.Fanout.P99Ms, b.Fanout.P99Ms),
		r("fan-out p99, median of rounds", "ms", medianP99(roundLatencies(p)), medianP99(baselineLatencies(b))),
		r("fan-out max", "ms", p.Fanout.MaxMs, b.Fanout.MaxMs),
		r("server CPU per host per fan-out", "µs", productServerCPUPerHost(p), baselineServerCPUPerHost(b)),
		r("receiver CPU per message", "µs", productReceiverCPUPerHost(p), baselineReceiverCPUPerMessage(b)),
		r("server RSS per host vs raw just connected", "KiB", float64(p.Memory.PerHostBytes)/1024, float64(b.Memory.PerConnBytes)/1024),
		r("server RSS per host vs raw after a message each", "KiB", float64(p.Memory.PerHostBytes)/1024, float64(b.Memory.PerConnAfterRoundBytes)/1024),
		r("kill -9 until all converged vs connect all", "s", p.Restart.ConvergedMs/1000, connect/1000),
		r("server CPU per connected host per second at rest", "µs", p.Idle.ServerUsPerHostSecond, b.Idle.ServerUsPerHostSecond),
		r("client CPU per connected host per second at rest", "µs", p.Idle.ClientUsPerHostSecond, b.Idle.ClientUsPerHostSecond),
	}
}

func roundLatencies(p *ProductResult) []Latency {
	var ls []Latency
	for _, r := range p.Rounds {
		ls = append(ls, r.Apply)
	}
	return ls
}

func baselineLatencies(b *BaselineResult) []Latency {
	var ls []Latency
	for _, r := range b.Rounds {
		ls = append(ls, r.Latency)
	}
	return ls
}

// productServerCPUPerHost is the serve process's CPU per host, averaged over the
// declare rounds (the declare command's whole run, --wait polling included).
func productServerCPUPerHost(p *ProductResult) float64 {
	var sum float64
	for _, r := range p.Rounds {
		sum += us(perUnit(r.Phase.CPU("serve"), r.Assigned))
	}
	return sum / float64(max(1, len(p.Rounds)))
}

// productReceiverCPUPerHost is this process's CPU (the agents: verify, apply,
// persist, report) per host, averaged over the declare rounds.
func productReceiverCPUPerHost(p *ProductResult) float64 {
	var sum float64
	for _, r := range p.Rounds {
		sum += us(perUnit(r.Phase.CPU("bench"), r.Assigned))
	}
	return sum / float64(max(1, len(p.Rounds)))
}

func baselineServerCPUPerHost(b *BaselineResult) float64 {
	var sum float64
	for _, r := range b.Rounds {
		sum += r.ServerCPUPerHostUs
	}
	return sum / float64(max(1, len(b.Rounds)))
}

func baselineReceiverCPUPerMessage(b *BaselineResult) float64 {
	var sum float64
	for _, r := range b.Rounds {
		sum += r.ReceiverCPUPerMessageUs
	}
	return sum / float64(max(1, len(b.Rounds)))
}

// failures counts every failure of the run.
func (r *Report) failures() int {
	n := 0
	if p := r.Product; p != nil {
		n += p.Mint.Failed + p.Enrol.Failed + p.Start.NotStarted + p.Start.Slow
		n += p.Start.Started - p.Start.Alive
		for _, rd := range append(p.Rounds, p.Restart.Round) {
			n += rd.Failures()
		}
		n += p.Revoke.Failed + p.Revoke.AgentsOther + p.Revoke.AgentsRunning + p.Revoke.PingFailures
	}
	if b := r.Baseline; b != nil {
		n += b.Connect.Failed
		for _, rd := range b.Rounds {
			n += rd.Missing
		}
	}
	return n
}

// Print writes the report as tables.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "\nfleet benchmark, %s: %d hosts, %d cores (%s), %s\n", r.Date, r.Config.Hosts, r.Machine.Cores, r.Machine.CPU, r.Machine.GoVersion)
	fmt.Fprintln(w, "agents run in the benchmark process and share the cores with the control plane.")
	if p := r.Product; p != nil {
		printProduct(w, r.Config, p)
	}
	if b := r.Baseline; b != nil {
		printBaseline(w, b)
	}
	if len(r.Ratios) > 0 {
		fmt.Fprintln(w, "\nthe product beside raw NATS")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "figure\tunit\tproduct\traw NATS\tratio\t")
		for _, x := range r.Ratios {
			rt := "-" // the baseline's figure is below what was resolved (CPU: 10 ms ticks)
			if x.Baseline != 0 {
				rt = ratioText(x.Ratio)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", x.Name, x.Unit, num(x.Product), num(x.Baseline), rt)
		}
		tw.Flush()
	}
	printGoals(w, r.Goals, r.Config.Hosts)
	fmt.Fprintf(w, "\nfailures counted: %d\n", r.Failures)
	if lo, hi := r.probeRange(); lo > 0 && hi > probeSpread*lo {
		fmt.Fprintf(w, "WARNING: the machine's speed changed during the run: one Ed25519 verification took %.1f µs on average in one phase and %.1f in another (probe µs above); figures of phases at different speeds, the baseline's among them, do not compare as they would on a steady machine\n", lo, hi)
	}
	if len(r.Disturbed) > 0 {
		fmt.Fprintln(w, "WARNING: other processes used the machine during these phases; their figures are not the code's alone:")
		for _, d := range r.Disturbed {
			fmt.Fprintln(w, "   "+d)
		}
	}
}

// gcText is a phase's serve collections, "-" when they were not read.
func gcText(g *GCUse) string {
	if g == nil {
		return "-"
	}
	return strconv.Itoa(g.Collections)
}

func printProduct(w io.Writer, cfg Config, p *ProductResult) {
	fmt.Fprintln(w, "\nthe product: meshctl serve (own process, real disk) and N agents (this process, tmpfs)")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "phase\twall\tserve CPU\tserve GCs\tbench CPU\tmeshctl CPU\tother CPU\tprobe µs\tbench GC before\t")
	for _, ph := range p.Phases {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", ph.Name, secs(ph.WallMs), secs(ph.CPUMs["serve"]), gcText(ph.ServeGC), secs(ph.CPUMs["bench"]), secs(ph.CPUMs["meshctl"]), secs(ph.CPUMs[otherCPU]), probeText(ph), secs(ph.CollectedMs))
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "1. tokens minted\t%d (%d failed), %.0f per second\t\n", p.Mint.Minted, p.Mint.Failed, p.Mint.PerSecond)
	fmt.Fprintf(tw, "2. enrolled (%d in flight)\t%d (%d failed) in %s; one: %s; server CPU %.0f µs per host\t\n",
		cfg.Inflight, p.Enrol.Enrolled, p.Enrol.Failed, secs(p.Enrol.Phase.WallMs), lat(p.Enrol.Latency), us(perUnit(p.Enrol.Phase.CPU("serve"), p.Enrol.Enrolled)))
	fmt.Fprintf(tw, "3. all alive\t%d of %d started alive after %s; first sync: %s; server CPU %.0f µs per host\t\n",
		p.Start.Alive, p.Start.Started, secs(p.Start.AllAliveMs), lat(p.Start.FirstSync), us(perUnit(p.Start.Phase.CPU("serve"), p.Start.Started)))
	for _, r := range p.Rounds {
		printRound(tw, r)
	}
	fmt.Fprintf(tw, "4. apply latency, all rounds\t%s\t\n", lat(p.Fanout))
	fmt.Fprintf(tw, "5. serve RSS\t%s ready, %s before hosts, %s with %d connected: %s per host\t\n",
		mib(p.Memory.ReadyBytes), mib(p.Memory.BeforeHostsBytes), mib(p.Memory.AllConnectedBytes), p.Memory.Connected, kib(p.Memory.PerHostBytes))
	fmt.Fprintf(tw, "5. at rest\t%s\t\n", idleText(p.Idle, "serve", "agents"))
	fmt.Fprintf(tw, "6. kill -9 with %d connected\tAPI answers %s after the kill (%s after the restart); converged %s after the kill\t\n",
		p.Restart.Connected, secs(p.Restart.APIMs), secs(p.Restart.RestartToAPIMs), secs(p.Restart.ConvergedMs))
	printRound(tw, p.Restart.Round)
	v := p.Revoke
	fmt.Fprintf(tw, "7. revoked\t%d of %d (%d failed) in %s; one: %s; agents stopped %d\t\n", v.Revoked, v.Requested, v.Failed, secs(v.TotalMs), lat(v.Each), v.AgentsStopped)
	fmt.Fprintf(tw, "   ping meanwhile\t%s (idle before: %s); %d failed\t\n", lat(v.Ping), lat(v.PingIdle), v.PingFailures)
	tw.Flush()
	printLog(w, "the agents (all run)", p.AgentLog)
	printLog(w, "meshctl serve (all run)", p.ServeLog)
	for _, r := range append(p.Rounds, p.Restart.Round) {
		for _, e := range r.Examples {
			fmt.Fprintf(w, "   %s: %s\n", r.Name, e)
		}
	}
}

func printRound(tw io.Writer, r RoundResult) {
	fmt.Fprintf(tw, "%s\texit %d, converged %d/%d in %s; apply %s; server CPU %.0f µs, agents %.0f µs per host; failures %d (of %d sampled files, %d differ)\t\n",
		r.Name, r.ExitCode, r.Converged, r.Assigned, secs(r.ConvergeMs), lat(r.Apply),
		us(perUnit(r.Phase.CPU("serve"), r.Assigned)), us(perUnit(r.Phase.CPU("bench"), r.Assigned)), r.Failures(), r.Sampled, r.SampleMismatch)
}

func printBaseline(w io.Writer, b *BaselineResult) {
	fmt.Fprintln(w, "\nraw NATS: nats-server (own process), mutual TLS, N connections from this process")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "phase\twall\tnats-server CPU\tbench CPU\tother CPU\tprobe µs\tbench GC before\t")
	for _, ph := range b.Phases {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", ph.Name, secs(ph.WallMs), secs(ph.CPUMs["nats-server"]), secs(ph.CPUMs["bench"]), secs(ph.CPUMs[otherCPU]), probeText(ph), secs(ph.CollectedMs))
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	c := b.Connect
	fmt.Fprintf(tw, "connect all\t%d (%d failed) in %s; one: %s; server CPU %.0f µs per connection\t\n", c.Connected, c.Failed, secs(c.Phase.WallMs), lat(c.Latency), c.ServerCPUPerUs)
	for i, r := range b.Rounds {
		fmt.Fprintf(tw, "fan-out round %d\t%d delivered (%d missing): %s; server CPU %.1f µs per host, receiver %.1f µs per message\t\n",
			i+1, r.Delivered, r.Missing, lat(r.Latency), r.ServerCPUPerHostUs, r.ReceiverCPUPerMessageUs)
	}
	fmt.Fprintf(tw, "fan-out, all rounds\t%s\t\n", lat(b.Fanout))
	fmt.Fprintf(tw, "server RSS\t%s idle, %s connected: %s per connection; %s once each carried a message: %s per connection\t\n",
		mib(b.Memory.IdleBytes), mib(b.Memory.ConnectedBytes), kib(b.Memory.PerConnBytes), mib(b.Memory.AfterRoundBytes), kib(b.Memory.PerConnAfterRoundBytes))
	fmt.Fprintf(tw, "at rest\t%s\t\n", idleText(b.Idle, "nats-server", "subscribers"))
	tw.Flush()
}

// idleText is an idle phase's figures, or why there are none.
func idleText(r IdleResult, server, clients string) string {
	if r.Phase.Name == "" {
		return "not measured (-idle 0)"
	}
	return fmt.Sprintf("%d connected for %s: %s %.2f µs CPU per host per second, %s %.2f",
		r.Connected, secs(r.Phase.WallMs), server, r.ServerUsPerHostSecond, clients, r.ClientUsPerHostSecond)
}

func lat(l Latency) string {
	return fmt.Sprintf("min %s p50 %s p99 %s max %s (n=%d)", msText(l.MinMs), msText(l.P50Ms), msText(l.P99Ms), msText(l.MaxMs), l.N)
}

func msText(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f ms", v)
	}
	return fmt.Sprintf("%.1f ms", v)
}

func secs(msv float64) string { return fmt.Sprintf("%.2f s", msv/1000) }

func num(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
func kib(b int64) string { return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10)) }

// printLog prints the most frequent warnings and errors.
func printLog(w io.Writer, who string, counts []LogCount) {
	var total int64
	for _, c := range counts {
		total += c.Count
	}
	fmt.Fprintf(w, "%s logged %d warnings and errors\n", who, total)
	for i, c := range counts {
		if i == 8 {
			fmt.Fprintf(w, "   ... and %d other messages\n", len(counts)-i)
			break
		}
		fmt.Fprintf(w, "   %7d %-5s %s\n", c.Count, c.Level, c.Message)
	}
}
