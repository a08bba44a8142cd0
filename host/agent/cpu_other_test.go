//go:build !unix

package agent

import "time"

// cpuClock is unavailable here: the benchmarks report wall time only.
type cpuClock struct{}

func startCPU() cpuClock { return cpuClock{} }

func (cpuClock) since() (time.Duration, bool) { return 0, false }
