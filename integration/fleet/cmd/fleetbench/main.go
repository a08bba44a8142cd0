// Command fleetbench is the mesh's fleet benchmark: a `meshctl serve` process on
// real disk, N real host agents in this process, and a raw NATS baseline in the same
// run. See docs/benchmarks.md, "A fleet".
//
//	go run ./integration/fleet/cmd/fleetbench -hosts 1000 [-json FILE] [-cpuprofile FILE]
//
// Run it from the repository: it builds meshctl from the module it is in. The
// subcommand `fleetbench nats-server -certs DIR` is the baseline's server, and
// `fleetbench wait-api -data DIR` the operator waiting for a restarted control plane;
// the benchmark starts both itself.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"mesh/integration/fleet"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "nats-server" {
		os.Exit(natsServer(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "wait-api" {
		os.Exit(waitAPI(os.Args[2:]))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg := fleet.DefaultConfig()
	fs := flag.NewFlagSet("fleetbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&cfg.Hosts, "hosts", cfg.Hosts, "fleet size N")
	fs.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "declare --all --wait rounds R")
	fs.IntVar(&cfg.Revoke, "revoke", cfg.Revoke, "nodes K revoked in the last phase")
	fs.DurationVar(&cfg.CheckFiles, "check-files", 0, "the agents' file check interval (meshhost run --check-files; 0 the agent's default, negative never)")
	fs.IntVar(&cfg.RevokeBatch, "revoke-batch", cfg.RevokeBatch, "nodes named in one revoke call (1: one call per node)")
	fs.IntVar(&cfg.Inflight, "inflight", cfg.Inflight, "enrolments (and baseline connects) in flight")
	fs.IntVar(&cfg.StartInflight, "start-inflight", cfg.StartInflight, "agents connecting at once at start; 0 starts all at once")
	fs.DurationVar(&cfg.WaitTimeout, "wait", cfg.WaitTimeout, "declare --wait timeout")
	fs.DurationVar(&cfg.PhaseTimeout, "phase-timeout", cfg.PhaseTimeout, "longest wait for the fleet in a phase")
	fs.IntVar(&cfg.MessageSize, "msg-size", cfg.MessageSize, "baseline message size, bytes")
	fs.StringVar(&cfg.ServeLogLevel, "serve-log-level", cfg.ServeLogLevel, "meshctl serve --log-level")
	fs.DurationVar(&cfg.Idle, "idle", cfg.Idle, "how long the connected fleet stays at rest before the rounds, to measure what pings and heartbeats cost (0 skips it)")
	fs.DurationVar(&cfg.RestartDelay, "restart-delay", cfg.RestartDelay, "how long serve stays down after the kill -9 of phase 6 (near 1s, it restarts as the agents reconnect)")
	fs.BoolVar(&cfg.Baseline, "baseline", cfg.Baseline, "run the raw NATS baseline")
	fs.BoolVar(&cfg.Product, "product", cfg.Product, "run the product's phases")
	fs.StringVar(&cfg.WorkDir, "work", cfg.WorkDir, "parent of the control plane's data directory, on real disk (default: the system temp dir)")
	fs.StringVar(&cfg.HostDir, "host-dir", cfg.HostDir, "parent of the hosts' state and managed roots (tmpfs)")
	fs.BoolVar(&cfg.Keep, "keep", cfg.Keep, "keep the directories after the run")
	fs.StringVar(&cfg.Meshctl, "meshctl", "", "a built meshctl to run (default: build it from the module in the working directory)")
	fs.StringVar(&cfg.ProfileDir, "profile-dir", "", "write CPU profiles of serve and of the agents for the phases -profile-phase names (and print what serve allocated in them), and serve's heap with the fleet connected, to this directory")
	fs.StringVar(&cfg.ProfilePhase, "profile-phase", "declare", "profile the phases whose name contains this")
	fs.IntVar(&cfg.ProfileSeconds, "profile-seconds", 5, "how long serve's CPU profile of a phase runs (from the phase's start)")
	jsonOut := fs.String("json", "", "also write every figure as JSON to this file")
	cpuProfile := fs.String("cpuprofile", "", "write this process's CPU profile (the agents, the baseline's clients) to this file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "fleetbench: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, "fleetbench:", err)
		return 1
	}
	cfg.Self, cfg.Out = self, stdout
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(stderr, "fleetbench:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "fleetbench:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, runErr := fleet.Run(ctx, cfg)
	if rep != nil {
		rep.Print(stdout)
		if *jsonOut != "" {
			if err := writeJSON(*jsonOut, rep); err != nil {
				fmt.Fprintln(stderr, "fleetbench:", err)
				return 1
			}
			fmt.Fprintf(stdout, "figures written to %s\n", *jsonOut)
		}
	}
	if runErr != nil {
		fmt.Fprintln(stderr, "fleetbench:", runErr)
		return 1
	}
	if rep.Failures > 0 {
		return 3
	}
	return 0
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// natsServer is the baseline's server process.
func natsServer(args []string) int {
	fs := flag.NewFlagSet("fleetbench nats-server", flag.ContinueOnError)
	certs := fs.String("certs", "", "directory of the baseline's certificates (required)")
	if err := fs.Parse(args); err != nil || *certs == "" {
		fmt.Fprintln(os.Stderr, "usage: fleetbench nats-server -certs DIR")
		return 2
	}
	if err := fleet.ServeNATS(*certs, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "fleetbench nats-server:", err)
		return 1
	}
	return 0
}

// waitAPI pings the control plane of a data directory until its leader answers, as
// an operator would from a process of its own, and prints how it went as JSON. It
// begins when a line arrives on stdin.
func waitAPI(args []string) int {
	fs := flag.NewFlagSet("fleetbench wait-api", flag.ContinueOnError)
	data := fs.String("data", "", "the control node's data directory (required)")
	limit := fs.Duration("limit", time.Minute, "how long to wait")
	if err := fs.Parse(args); err != nil || *data == "" {
		fmt.Fprintln(os.Stderr, "usage: fleetbench wait-api -data DIR [-limit D]")
		return 2
	}
	// The benchmark starts this process before it kills serve, and says when to begin.
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fmt.Fprintln(os.Stderr, "fleetbench wait-api: no begin on stdin:", err)
		return 1
	}
	cp := &fleet.ControlPlane{Dir: *data}
	w, err := cp.WaitAPI(context.Background(), *limit)
	if jerr := json.NewEncoder(os.Stdout).Encode(w); jerr != nil {
		fmt.Fprintln(os.Stderr, "fleetbench wait-api:", jerr)
		return 1
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleetbench wait-api:", err)
		return 1
	}
	return 0
}
