package fleet

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// Goal is one of the fleet's targets (docs/benchmarks.md, "A fleet") judged on the
// figures of one run: a ratio to raw NATS measured in the same run, or a figure of
// the product's own. A goal the run cannot judge (its phase or the baseline did not
// run, or the baseline's figure is below what was resolved) is left out, not
// counted as met.
type Goal struct {
	Name string `json:"name"`
	// Unit is "×" for a ratio to raw NATS, else the unit of Value and Bound.
	Unit  string  `json:"unit"`
	Value float64 `json:"value"`
	// Bound is the most Value may be for the goal to be met.
	Bound float64 `json:"bound"`
	Met   bool    `json:"met"`
}

// bigFleet is the fleet size the goals are set for. A smaller fleet is judged on
// the fan-out alone, against the goal set for 1,000 hosts (the stricter): the other
// figures of a small fleet are mostly fixed costs (a restart, an election) over few
// hosts.
const bigFleet = 10000

// goals judges a run against the targets. hosts is the fleet size the run was
// asked for.
func goals(p *ProductResult, b *BaselineResult, hosts int) []Goal {
	if p == nil {
		return nil
	}
	var gs []Goal
	// clean says the phase behind the figure counted no failure: a fast phase that
	// lost hosts does not meet its goal.
	add := func(name, unit string, value, bound float64, clean bool) {
		gs = append(gs, Goal{Name: name, Unit: unit, Value: value, Bound: bound, Met: clean && value <= bound})
	}
	vsRaw := func(name string, prod, base, bound float64, clean bool) {
		if prod > 0 && base > 0 {
			add(name, "×", prod/base, bound, clean)
		}
	}
	roundsClean := len(p.Rounds) > 0
	for _, r := range p.Rounds {
		roundsClean = roundsClean && r.Failures() == 0
	}
	if b != nil && len(p.Rounds) > 0 {
		fanout := 5.0
		if hosts >= bigFleet {
			fanout = 7
		}
		vsRaw("fan-out p99 (median of rounds) vs raw NATS", medianP99(roundLatencies(p)), medianP99(baselineLatencies(b)), fanout, roundsClean)
	}
	if hosts < bigFleet {
		return gs
	}
	if b != nil {
		connect := b.Connect.Phase.WallMs
		if len(p.Rounds) > 0 {
			vsRaw("server CPU per host per fan-out vs raw NATS", productServerCPUPerHost(p), baselineServerCPUPerHost(b), 3, roundsClean)
		}
		if e := p.Enrol; e.Enrolled+e.Failed > 0 {
			vsRaw("enrol all vs raw connect all", e.Phase.WallMs, connect, 1.5, e.Failed == 0)
		}
		if s := p.Start; s.Started > 0 {
			alive := s.AllAliveMs
			if alive == 0 { // not all alive within the phase's timeout
				alive = s.Phase.WallMs
			}
			vsRaw("agents started until all alive vs raw connect all", alive, connect, 1.5, s.AllAliveMs > 0 && s.NotStarted == 0)
		}
		if p.Memory.Connected > 0 {
			vsRaw("serve RSS per host vs raw per connection (just connected)", float64(p.Memory.PerHostBytes), float64(b.Memory.PerConnBytes), 1.1, true)
		}
		if r := p.Restart; r.ConvergedMs > 0 {
			// A declare whose --wait ran out (exit 5) saw not every host converged.
			vsRaw("kill -9 until all converged vs raw connect all", r.ConvergedMs, connect, 2, r.Round.Failures() == 0 && r.Round.ExitCode == 0)
		}
	}
	if len(p.Rounds) > 0 {
		add("agent CPU per applied declaration", "µs", productReceiverCPUPerHost(p), 150, roundsClean)
	}
	if p.Restart.APIMs > 0 {
		add("kill -9 until the API answers", "s", p.Restart.APIMs/1000, 3, true)
	}
	v := p.Revoke
	revokeClean := v.Failed == 0 && v.AgentsOther == 0 && v.AgentsRunning == 0
	if v.Requested == 100 && v.Revoked+v.Failed > 0 {
		add("revoke 100 nodes, all calls", "s", v.TotalMs/1000, 2, revokeClean)
	}
	if v.Ping.N > 0 {
		add("slowest operator ping while revoking", "ms", v.Ping.MaxMs, 50, v.PingFailures == 0)
	}
	return gs
}

// printGoals writes the goals as a table, and how many the run met.
func printGoals(w io.Writer, gs []Goal, hosts int) {
	if len(gs) == 0 {
		return
	}
	fmt.Fprintln(w, "\ngoals (docs/benchmarks.md, \"A fleet\")")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	met := 0
	for _, g := range gs {
		verdict := "NOT MET"
		if g.Met {
			verdict, met = "met", met+1
		}
		fmt.Fprintf(tw, "  %s\t%s\t≤ %s\t%s\t\n", g.Name, goalFigure(g.Value, g.Unit), goalFigure(g.Bound, g.Unit), verdict)
	}
	tw.Flush()
	fmt.Fprintf(w, "goals met: %d of %d\n", met, len(gs))
	if hosts < bigFleet {
		fmt.Fprintf(w, "(the other goals are set for %d hosts: run with -hosts %d)\n", bigFleet, bigFleet)
	}
}

// goalFigure spells a goal's value or bound in its unit.
func goalFigure(v float64, unit string) string {
	if unit == "×" {
		return ratioText(v)
	}
	return num(v) + " " + unit
}

// ratioText spells a ratio with two decimals below 10, so that a figure just over a
// bound (1.13 against 1.1) does not read as on it.
func ratioText(r float64) string {
	if r < 10 {
		return fmt.Sprintf("%.2f×", r)
	}
	return fmt.Sprintf("%.1f×", r)
}
