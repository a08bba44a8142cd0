// Package integration holds the black-box and fault-injection tests: real control
// planes (the built meshctl, or the daemon in-process) with their embedded nats-server,
// real host agents, and faults injected between them.
package integration

import (
	"fmt"
	"os"
	"testing"

	"mesh/integration/harness"
)

// bin is the binaries built once for the whole package by TestMain.
var bin harness.Binaries

func TestMain(m *testing.M) {
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
