// Package integration holds the black-box and fault-injection tests: real control
// planes (the built meshctl, or the daemon in-process) with their embedded nats-server,
// real host agents, and faults injected between them.
package integration

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"mesh/integration/harness"
)

// bin is the binaries built once for the whole package by TestMain.
var bin harness.Binaries

// parallelWaiting is how many tests marked parallel run at once. They are the ones
// that mostly wait (a 30 s grace without a leader, the kernel's 15 s retransmission
// timeout, hosts moving back to their first broker, an election, a liveness
// window): each was measured alone to use less than a fifth of its wall time in CPU,
// its own and its daemons'. Run one after the other they took over four of the
// package's ten minutes, idle. More than GOMAXPROCS (go test's default), as they
// sleep far more than they compute; few enough that a loaded 2-core runner keeps
// their margins. A test that computes (many hosts, a build, a write storm) stays
// serial.
const parallelWaiting = 4

func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		if err := flag.Set("test.parallel", fmt.Sprint(parallelWaiting)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	dir, err := os.MkdirTemp("", "mesh-integration-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin, err = harness.Build(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
