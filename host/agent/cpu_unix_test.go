//go:build unix

package agent

import (
	"syscall"
	"time"
)

// cpuClock is the process's CPU time (user and system) when a measurement began.
type cpuClock struct{ start time.Duration }

func startCPU() cpuClock { return cpuClock{start: processCPU()} }

// since returns the process's CPU time used since startCPU.
func (c cpuClock) since() (time.Duration, bool) { return processCPU() - c.start, true }

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
