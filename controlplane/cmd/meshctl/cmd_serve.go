package main

import (
	"context"
	"flag"
	"log/slog"
	"os/signal"
	"syscall"
	"time"

	"mesh/controlplane/daemon"
	"mesh/controlplane/datadir"
	"mesh/controlplane/replication"
)

func serveCommand() command {
	return command{
		name:  "serve",
		usage: "--data DIR",
		summary: `Run this control node: Raft member, embedded broker, enrolment and declarations.
Runs until interrupted (SIGINT or SIGTERM). Logs go to stderr.`,
		setup: func(fs *flag.FlagSet, cio *cliIO) func([]string) error {
			var (
				dir       string
				logLevel  string
				logJSON   bool
				heartbeat time.Duration
				offline   time.Duration
				reconcile time.Duration
			)
			def := replication.DefaultTimeouts()
			fs.StringVar(&dir, "data", "", "data directory made by bootstrap or join (required)")
			fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
			fs.BoolVar(&logJSON, "log-json", false, "log JSON lines instead of text")
			fs.DurationVar(&heartbeat, "raft-heartbeat", def.Heartbeat, "Raft heartbeat and election timeout; raise it on slow or loaded machines")
			fs.DurationVar(&offline, "offline-after", 45*time.Second, "a node that has not reported for this long is shown offline")
			fs.DurationVar(&reconcile, "reconcile", 10*time.Second, "how often declarations not yet applied are sent again")
			var metricsListen string
			fs.StringVar(&metricsListen, "metrics-listen", "", "serve /metrics (Prometheus), /healthz and /readyz on this ip:port (off by default)")
			var snapInterval time.Duration
			var snapThreshold uint64
			fs.DurationVar(&snapInterval, "raft-snapshot-interval", 2*time.Minute, "how often Raft checks whether to snapshot the state and compact its log")
			fs.Uint64Var(&snapThreshold, "raft-snapshot-threshold", 2048, "log entries since the last snapshot that trigger a new one")
			return func(args []string) error {
				if err := noPositional(args); err != nil {
					return err
				}
				if dir == "" {
					return usagef("--data is required")
				}
				if snapThreshold == 0 || snapInterval < time.Second {
					return usagef("--raft-snapshot-threshold must be positive and --raft-snapshot-interval at least 1s")
				}
				if heartbeat < 100*time.Millisecond {
					return usagef("--raft-heartbeat %s is too short (at least 100ms)", heartbeat)
				}
				log, err := newLogger(cio, logLevel, logJSON)
				if err != nil {
					return err
				}
				ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
				defer stop()
				d, err := daemon.Open(ctx, daemon.Options{
					Dir:    datadir.Dir(dir),
					Logger: log,
					Timeouts: replication.Timeouts{Heartbeat: heartbeat, Election: heartbeat, LeaderLease: heartbeat / 2, Commit: def.Commit,
						SnapshotInterval: snapInterval, SnapshotThreshold: snapThreshold},
					OfflineAfter:      offline,
					ReconcileInterval: reconcile,
					MetricsListen:     metricsListen,
				})
				if err != nil {
					return err
				}
				defer d.Close()
				err = d.Run(ctx)
				log.Info("control node stopped")
				return err
			}
		},
	}
}

func newLogger(cio *cliIO, level string, asJSON bool) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level %q: use debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	if asJSON {
		return slog.New(slog.NewJSONHandler(cio.stderr, opts)), nil
	}
	return slog.New(slog.NewTextHandler(cio.stderr, opts)), nil
}
