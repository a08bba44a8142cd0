package fleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"time"
)

// Run runs the benchmark: the raw NATS baseline first (so that its server starts on
// an idle machine), then the product's seven phases, and returns the report. An
// error that stops a part still returns the figures gathered until then.
func Run(ctx context.Context, cfg Config) (rep *Report, err error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	nofile, err := RaiseNoFile()
	if err != nil {
		return nil, fmt.Errorf("raise RLIMIT_NOFILE: %w", err)
	}
	// Per host: the agent's connection here and on the broker, and during
	// enrolment two; plus files. Warn rather than fail: a small run fits.
	if need := uint64(cfg.Hosts) + 1000; nofile < need {
		fmt.Fprintf(cfg.Out, "warning: RLIMIT_NOFILE is %d, below the %d this run needs\n", nofile, need)
	}
	rep = &Report{Date: time.Now().Format("2006-01-02"), Machine: thisMachine(nofile), Config: cfg}

	work, err := os.MkdirTemp(cfg.WorkDir, "fleetbench-")
	if err != nil {
		return rep, err
	}
	hostDir, err := os.MkdirTemp(cfg.HostDir, "fleetbench-hosts-")
	if err != nil {
		return rep, err
	}
	defer func() {
		switch {
		case cfg.Keep:
			fmt.Fprintf(cfg.Out, "kept %s (control plane, logs) and %s (hosts)\n", work, hostDir)
		case err != nil:
			// The logs say why; the hosts' tmpfs is memory and goes.
			fmt.Fprintf(cfg.Out, "kept %s (control plane, logs) for the failure\n", work)
			os.RemoveAll(hostDir)
		default:
			os.RemoveAll(work)
			os.RemoveAll(hostDir)
		}
	}()
	fmt.Fprintf(cfg.Out, "fleetbench: %d hosts, RLIMIT_NOFILE %d, work %s, hosts %s\n", cfg.Hosts, nofile, work, hostDir)

	// Build first: a checkout that does not build should fail before the baseline.
	meshctl := cfg.Meshctl
	if cfg.Product && meshctl == "" {
		if meshctl, err = buildMeshctl(cfg, work); err != nil {
			return rep, err
		}
	}
	var errs []error
	if cfg.Baseline {
		certs := filepath.Join(work, "baseline-certs")
		if err := os.Mkdir(certs, 0o700); err != nil {
			return rep, err
		}
		rep.Baseline, err = runBaseline(ctx, cfg, certs)
		if err != nil {
			errs = append(errs, fmt.Errorf("baseline: %w", err))
		}
		// The baseline's connections are closed; give their memory back before the
		// product's part runs in this process.
		runtime.GC()
		debug.FreeOSMemory()
	}
	if cfg.Product && ctx.Err() == nil {
		rep.Product, err = runProduct(ctx, cfg, meshctl, work, hostDir)
		if err != nil {
			errs = append(errs, fmt.Errorf("product: %w", err))
		}
	}
	rep.Ratios = ratios(rep.Product, rep.Baseline)
	rep.Goals = goals(rep.Product, rep.Baseline, cfg.Hosts)
	rep.Failures = rep.failures()
	rep.Disturbed = rep.disturbedPhases()
	return rep, errors.Join(errs...)
}

// buildMeshctl builds meshctl into work from the module the working directory is in.
func buildMeshctl(cfg Config, work string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	fmt.Fprintf(cfg.Out, "== build meshctl from %s\n", root)
	return BuildMeshctl(root, work)
}
