package fleet

import (
	"fmt"
	"io"
	"time"
)

// Phase is one timed phase: its wall time and the CPU time (user+system) each
// process spent in it.
type Phase struct {
	Name   string             `json:"name"`
	WallMs float64            `json:"wall_ms"`
	CPUMs  map[string]float64 `json:"cpu_ms"`
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
	out     io.Writer // progress lines
	phases  []Phase
	// prof, when set, profiles the phases it matches.
	prof *profiler
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
}

// begin starts timing a phase and prints a progress line.
func (m *meter) begin(name string) *span {
	fmt.Fprintf(m.out, "== %s\n", name)
	s := &span{m: m, name: name, cpu: make([]time.Duration, len(m.sources)+1)}
	for i, src := range m.sources {
		s.cpu[i] = m.reading(src)
	}
	s.cpu[len(m.sources)] = m.reading(machine())
	s.prof = m.prof.begin(name)
	s.start = time.Now()
	return s
}

// end stops the phase, records it and prints what it cost.
func (s *span) end() Phase {
	wall := time.Since(s.start)
	defer s.prof.end()
	p := Phase{Name: s.name, WallMs: ms(wall), CPUMs: map[string]float64{}}
	line := fmt.Sprintf("   %s: %s wall", s.name, wall.Round(time.Millisecond))
	var known time.Duration
	for i, src := range s.m.sources {
		d := s.m.reading(src) - s.cpu[i]
		known += d
		p.CPUMs[src.name] = ms(d)
		line += fmt.Sprintf(", %s %s CPU", src.name, d.Round(time.Millisecond))
	}
	other := max(0, s.m.reading(machine())-s.cpu[len(s.m.sources)]-known)
	p.CPUMs[otherCPU] = ms(other)
	line += fmt.Sprintf(", other %s CPU", other.Round(time.Millisecond))
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
