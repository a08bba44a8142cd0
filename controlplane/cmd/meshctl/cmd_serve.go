package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"mesh/controlplane/api"
	"mesh/controlplane/backup"
	"mesh/controlplane/daemon"
	"mesh/controlplane/datadir"
	"mesh/controlplane/replication"
	"mesh/host/busyaddr"
	"mesh/host/hangup"
)

// Defaults and bounds of serve's periods and sizes.
const (
	defaultOfflineAfter = 45 * time.Second
	defaultReconcile    = 10 * time.Second
	// maxSnapshotThreshold: more entries than this between snapshots is a log
	// that is never compacted in practice.
	maxSnapshotThreshold = 1_000_000
)

func serveCommand() command {
	return command{
		name:       "serve",
		ownSignals: true,
		usage:      "--data DIR [--log-format text|json] [--backup-dir DIR]",
		summary: `Run this control node: Raft member, embedded broker, enrolment and declarations.
Runs until interrupted (SIGINT or SIGTERM), which stops it at any point, starting
included (exit 9 if it was not ready yet). It holds the data directory's lock: a
second process on the same directory is refused at once (exit 8). It refuses a
directory that is not a control node's, or whose keys, credentials or raft/ others may
read or change (exit 7, naming the chmod or chown that mends it), or one of whose files
is missing or damaged (exit 7, naming it), or whose certificate (tls.pem, ca.pem)
expired or is not valid yet by this machine's clock (exit 7, naming it, when it
expired and how to renew it), and that of a control node that was removed (exit 6).
It warns when either certificate has less than 180 days left, at start and daily. Logs go to stderr.
With --backup-dir it backs itself up while it serves: at once (unless its newest backup
is younger than --backup-every), then every --backup-every, a directory
DIR/NODE-MESH-YYYYMMDDTHHMMSSZ-iINDEX (MESH: the CA pin's first 8 digits) that is a whole data
directory (meshctl check passes it, meshctl serve starts on it), holding the
replicated state as of Raft index INDEX, taken through Raft; the newest of each of
the newest --backup-keep intervals of --backup-every is kept. DIR is created (0700) if missing and refused, exit 7, as the
data directory is, if another user owns it or others may write it; one that cannot be
made now (a disk not mounted) is logged. A backup that fails is logged and tried
again at the next interval; serve goes on
(docs/operations.md, "Backing up").
Under systemd (Type=notify) it reports ready once its replicated state is current and
its broker accepts connections (dist/systemd/meshctl.service).`,
		setup: func(c *cobra.Command, cio *cliIO) func([]string) error {
			fs := c.Flags()
			var (
				dir       string
				logLevel  string
				logFormat string
				logJSON   bool
				heartbeat time.Duration
				offline   time.Duration
				reconcile time.Duration
				shared    time.Duration
			)
			def := replication.DefaultTimeouts()
			fs.StringVar(&dir, "data", "", "data directory made by bootstrap or join (required)")
			fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
			fs.StringVar(&logFormat, "log-format", "text", "text (key=value lines) or json (one JSON object a line)")
			fs.BoolVar(&logJSON, "log-json", false, "the same as --log-format json")
			_ = c.MarkFlagDirname("data")
			_ = c.RegisterFlagCompletionFunc("log-format", cobra.FixedCompletions([]cobra.Completion{"text", "json"}, cobra.ShellCompDirectiveNoFileComp))
			_ = c.RegisterFlagCompletionFunc("log-level", cobra.FixedCompletions([]cobra.Completion{"debug", "info", "warn", "error"}, cobra.ShellCompDirectiveNoFileComp))
			fs.DurationVar(&heartbeat, "raft-heartbeat", def.Heartbeat, "Raft heartbeat and election timeout; raise it on slow or loaded machines (100ms to 1m)")
			fs.DurationVar(&offline, "offline-after", defaultOfflineAfter, "a node that has not reported for this long is shown offline, or for three of the report intervals its agent says it has if longer (1s to 1h)")
			fs.DurationVar(&reconcile, "reconcile", defaultReconcile, "how often declarations not yet applied are sent again (1s to 1h)")
			fs.DurationVar(&shared, "shared-key-grace", api.SharedKeyGrace, "a node whose key more than one connection holds for this long counts as held by two machines (a clone): failing key_shared (1s to 1h; below 100s an agent's reconnection may count, its old connection not yet closed by its broker)")
			var metricsListen string
			var addressWait time.Duration
			fs.StringVar(&metricsListen, "metrics-listen", "", "serve /metrics (Prometheus), /healthz and /readyz on this ip:port (off by default)")
			fs.DurationVar(&addressWait, "address-wait", defaultAddressWait, "at start, how long to wait for this node's addresses to appear on the machine (an IPv6 address in duplicate address detection, a network not up yet) before failing (0s to 5m)")
			var profiling bool
			fs.BoolVar(&profiling, "pprof", false, "also serve Go's profiler under /debug/pprof/ on --metrics-listen (exposes internals: keep the address private)")
			var requireBound bool
			fs.BoolVar(&requireBound, "require-bound-logins", false, "refuse logins not bound to their TLS session: meshhost and meshctl older than this version, and the stock nats CLI (see mesh_broker_unbound_logins_total before turning it on)")
			var requireSigned bool
			fs.BoolVar(&requireSigned, "require-signed-changes", false, "refuse operator changes not signed by their credentials' key: those of the stock nats CLI and of meshctl older than this version (the log names them by=(unsigned) before you turn it on)")
			var maxHosts int
			fs.IntVar(&maxHosts, "max-hosts", 0, "the most host connections this control node holds; more are refused and go to another control node (default: what the open-file limit allows, less room for operators and the control plane)")
			var snapInterval time.Duration
			var snapThreshold uint64
			fs.DurationVar(&snapInterval, "raft-snapshot-interval", def.SnapshotInterval, "how often Raft checks whether to snapshot the state and compact its log (1s to 1h)")
			fs.Uint64Var(&snapThreshold, "raft-snapshot-threshold", def.SnapshotThreshold, "log entries since the last snapshot that trigger a new one (1 to 1000000)")
			var backupDir string
			var backupEvery time.Duration
			var backupKeep int
			fs.StringVar(&backupDir, "backup-dir", "", "back this control node up while it serves, into this directory (off by default; not the data directory, nor inside its raft/)")
			fs.DurationVar(&backupEvery, "backup-every", backup.DefaultEvery, "with --backup-dir: how often a backup is taken (1m to 168h); one is taken at start too, unless the newest is younger")
			fs.IntVar(&backupKeep, "backup-keep", backup.DefaultKeep, "with --backup-dir: how many intervals of --backup-every keep a backup of this node, the newest of each (at least 1)")
			_ = c.MarkFlagDirname("backup-dir")
			return func(args []string) error {
				if err := noPositional(args); err != nil {
					return err
				}
				if dir == "" {
					return usagef("--data is required")
				}
				backups, err := backupFlags(c, dir, backupDir, backupEvery, backupKeep)
				if err != nil {
					return err
				}
				if snapThreshold == 0 || snapThreshold > maxSnapshotThreshold {
					return usagef("--raft-snapshot-threshold %d: must be between 1 and %d entries (the default is %d)", snapThreshold, maxSnapshotThreshold, def.SnapshotThreshold)
				}
				// Past an hour, a period is a typo (1000h for 10s) that leaves the log
				// uncompacted, a half-open host alive, or a declaration unsent.
				if err := checkDuration("raft-snapshot-interval", snapInterval, time.Second, time.Hour, def.SnapshotInterval); err != nil {
					return err
				}
				if maxHosts < 0 {
					return usagef("--max-hosts must not be negative (0: what the open-file limit allows)")
				}
				if err := checkRaftHeartbeat(heartbeat); err != nil {
					return err
				}
				// Both are periods the daemon ticks on or compares against: zero was
				// taken silently for the default, and a negative --reconcile crashed
				// serve once it led (a ticker's interval must be positive).
				if err := checkDuration("offline-after", offline, time.Second, time.Hour, defaultOfflineAfter); err != nil {
					return err
				}
				if err := checkDuration("reconcile", reconcile, time.Second, time.Hour, defaultReconcile); err != nil {
					return err
				}
				if err := checkDuration("shared-key-grace", shared, time.Second, time.Hour, api.SharedKeyGrace); err != nil {
					return err
				}
				if err := checkDuration("address-wait", addressWait, 0, 5*time.Minute, defaultAddressWait); err != nil {
					return err
				}
				if err := checkMetricsListen(metricsListen); err != nil {
					return err
				}
				if cfg, err := datadir.Dir(dir).LoadConfig(); err == nil {
					// A data directory that cannot be read is serve's to report.
					if err := checkMetricsApart(metricsListen, cfg); err != nil {
						return err
					}
				}
				format, err := logFormatFlag(logFormat, logJSON, c.Flags().Changed("log-format"))
				if err != nil {
					return err
				}
				log, err := newLogger(cio.stderr, logLevel, format)
				if err != nil {
					return err
				}
				ctx, stop := signalContext()
				defer stop()
				defer hangup.Ignore(log, "this control node goes on serving")()
				// A log line written to a pipe that closed (`serve 2>&1 | tee`, tee
				// ended by the same Ctrl-C) ended serve by SIGPIPE, skipping its
				// clean stop (a review): the write fails instead. Caught, not
				// ignored, as the agent does (an ignored signal is inherited).
				signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
				if profiling && metricsListen == "" {
					return usagef("--pprof serves on the --metrics-listen address: give one")
				}
				build := readVersion("meshctl")
				opts := daemon.Options{
					Dir:      datadir.Dir(dir),
					Logger:   log,
					Version:  build.Version,
					Revision: build.Revision,
					Timeouts: replication.Timeouts{Heartbeat: heartbeat, Election: heartbeat, LeaderLease: heartbeat / 2, Commit: def.Commit,
						SnapshotInterval: snapInterval, SnapshotThreshold: snapThreshold},
					OfflineAfter:         offline,
					ReconcileInterval:    reconcile,
					SharedKeyGrace:       shared,
					MetricsListen:        metricsListen,
					Profiling:            profiling,
					RequireBoundLogins:   requireBound,
					RequireSignedChanges: requireSigned,
					MaxHosts:             maxHosts,
					Backup:               backups,
				}
				var ready atomic.Bool
				err = interruptible(ctx, func() error { return serve(ctx, cio, log, opts, addressWait, &ready) })
				return stopOverdue(err, ready.Load(), log)
			}
		},
	}
}

// backupFlags reads --backup-dir, --backup-every and --backup-keep: nil when
// --backup-dir is not given (the other two then change nothing, and are refused
// alone: they would be taken for backups that are not taken).
func backupFlags(c *cobra.Command, data, dir string, every time.Duration, keep int) (*daemon.BackupOptions, error) {
	if dir == "" {
		for _, name := range []string{"backup-every", "backup-keep"} {
			if c.Flags().Changed(name) {
				return nil, usagef("--%s takes effect only with --backup-dir: give the directory the backups go in", name)
			}
		}
		return nil, nil
	}
	if err := checkDuration("backup-every", every, backup.MinEvery, backup.MaxEvery, backup.DefaultEvery); err != nil {
		return nil, err
	}
	if every%time.Second != 0 {
		// Backups are named to the second, and kept one per interval by those
		// names: two an interval of 1m0.5s apart could share one (a review).
		return nil, usagef("--backup-every %s: give whole seconds (backups are named, and kept, by the second)", every)
	}
	if keep < 1 {
		return nil, usagef("--backup-keep %d: keep at least 1 backup (the default is %d)", keep, backup.DefaultKeep)
	}
	abs, err := backup.Resolve(dir, datadir.Dir(data))
	if err != nil {
		return nil, usagef("--backup-dir %s: %v", dir, err)
	}
	return &daemon.BackupOptions{Dir: abs, Every: every, Keep: keep}, nil
}

// checkMetricsListen refuses a --metrics-listen that is no address, as the usage
// error it is: found only when serve listened on it, it came after the data
// directory was locked and Raft opened, and exited 1 as a failure of the node.
// Empty is off.
func checkMetricsListen(addr string) error {
	if addr == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return usagef("--metrics-listen %q: give ip:port (127.0.0.1:9300, say)", addr)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return usagef("--metrics-listen %q: the port is not a number from 1 to 65535", addr)
	}
	return nil
}

// checkMetricsApart refuses a --metrics-listen on the port of one of the node's own
// listeners (broker, Raft, cluster) where both could be the same socket: the metrics
// listener took it first and the broker failed "address already in use", its own
// flag unnamed. Addresses are compared as addresses, a name by those it resolves
// to: compared as text, localhost:7300 passed beside 127.0.0.1:7300, and took the
// broker's port (a review).
func checkMetricsApart(metrics string, cfg datadir.Config) error {
	if metrics == "" {
		return nil
	}
	mhost, mport, err := net.SplitHostPort(metrics)
	if err != nil {
		return nil // checkMetricsListen said so
	}
	mips := hostIPs(mhost)
	for _, own := range []struct{ what, addr string }{{"broker (listen)", cfg.Listen}, {"Raft (raft_listen)", cfg.RaftListen}, {"cluster (cluster_listen)", cfg.ClusterListen}} {
		host, port, err := net.SplitHostPort(own.addr)
		if err != nil || port != mport {
			continue
		}
		clash := mhost == host || mhost == "" || host == ""
		for _, ip := range hostIPs(host) {
			for _, mip := range mips {
				clash = clash || ip == mip || ip.IsUnspecified() || mip.IsUnspecified()
			}
		}
		if clash {
			return usagef("--metrics-listen %s takes the port of this control node's %s address %s (mesh.json): give another port, such as 9300", metrics, own.what, own.addr)
		}
	}
	return nil
}

// hostIPs is host's address, or the addresses the name host resolves to (none if it
// does not), IPv4-mapped ones as IPv4.
func hostIPs(host string) []netip.Addr {
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip.Unmap().WithZone("")}
	}
	ips, _ := net.LookupIP(host)
	var out []netip.Addr
	for _, ip := range ips {
		if a, ok := netip.AddrFromSlice(ip); ok {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// checkRaftHeartbeat bounds --raft-heartbeat, which is also the election timeout: a
// leader lost is replaced after about that long, so a heartbeat of hours would leave
// the control plane without one for hours.
func checkRaftHeartbeat(d time.Duration) error {
	switch {
	case d < 100*time.Millisecond:
		return usagef("--raft-heartbeat %s is too short (at least 100ms)", d)
	case d > time.Minute:
		return usagef("--raft-heartbeat %s is too long (at most 1m: it is also how long a lost leader goes unreplaced)", d)
	}
	return nil
}

// hostPrefix is the address to add back for a listener's error err, as `ip addr
// add` takes it: ADDRESS/32 for IPv4, ADDRESS/128 for IPv6 (a /32 of an IPv6
// address adds a route to a quarter of the Internet's addresses).
func hostPrefix(err error) string {
	var le *busyaddr.ListenError
	if errors.As(err, &le) {
		if ap, perr := netip.ParseAddrPort(le.Addr); perr == nil && ap.Addr().Unmap().Is6() {
			return "ADDRESS/128"
		}
	}
	return "ADDRESS/32"
}

// defaultAddressWait is how long serve waits at start for its addresses to appear
// (waitForAddresses): an IPv6 address added at boot is unusable for a second or two
// of duplicate address detection, and failing at once spent the unit's restarts
// on an address a lease brought a little late (a review).
const defaultAddressWait = 15 * time.Second

// waitForAddresses waits, up to wait, until this machine has every address of addrs
// to listen on (no EADDRNOTAVAIL), saying once what it waits for: in the log and to
// systemd. Any other outcome, a port in use included, is left to the listeners.
func waitForAddresses(ctx context.Context, cio *cliIO, log *slog.Logger, wait time.Duration, addrs ...string) {
	deadline := time.Now().Add(wait)
	said := ""
	for {
		missing := ""
		for _, a := range addrs {
			ln, err := net.Listen("tcp", a)
			if err == nil {
				ln.Close()
				continue
			}
			if errors.Is(err, syscall.EADDRNOTAVAIL) {
				missing = a
				break
			}
		}
		if missing == "" || !time.Now().Before(deadline) {
			return
		}
		if missing != said {
			said = missing
			log.Warn("waiting for an address of this control node to appear on this machine (an IPv6 address in duplicate address detection, a network not up yet)",
				"addr", missing, "wait", wait.String())
			_ = notifyState(cio, "STATUS=waiting for address "+missing+" to appear on this machine")
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// serveGCPercent is the garbage collector's target for `meshctl serve` (GOGC).
const serveGCPercent = 50

// serve runs the control node of opts.Dir until ctx ends, holding the directory's
// lock throughout.
// stopOverdue is serve's outcome err, once interruptible returned it: a control node
// that was ready and did not finish its stop within the grace after a signal (a
// hand-over and a drain beside a peer that does not answer, on a loaded machine)
// exits 0 with a warning, not 9, which the exit codes keep for a stop while
// starting (a docs walkthrough).
func stopOverdue(err error, ready bool, log *slog.Logger) error {
	var overdue *overdueError
	if !ready || !errors.As(err, &overdue) {
		return err
	}
	log.Warn("control node stopped without waiting for the rest of its stop: it had not ended "+interruptGrace.String()+" after the signal "+
		"(a control node that does not answer, most likely: meshctl control status on another node names it); every file it writes is whole, and nothing is lost",
		"reason", overdue.cause.Error())
	return nil
}

func serve(ctx context.Context, cio *cliIO, log *slog.Logger, opts daemon.Options, addressWait time.Duration, ready *atomic.Bool) error {
	privateUmask()
	lock, err := opts.Dir.Lock("meshctl serve")
	if errors.Is(err, fs.ErrNotExist) {
		// No directory: say what it lacks, as for one without mesh.json.
		if _, cerr := opts.Dir.LoadConfig(); cerr != nil {
			return cerr
		}
	}
	if err != nil {
		return err
	}
	defer lock.Release()
	if cio.getenv("GOGC") == "" {
		// Every connected host holds the broker's buffers and the daemon's records,
		// and the garbage collector lets the heap grow to twice what is live before
		// it collects. Half of that keeps the resident memory per host close to a
		// plain nats-server's for a few percent of CPU (docs/benchmarks.md). GOGC,
		// when set, decides instead.
		debug.SetGCPercent(serveGCPercent)
	}
	if cfg, err := opts.Dir.LoadConfig(); err == nil {
		waitForAddresses(ctx, cio, log, addressWait, cfg.Listen, cfg.RaftListen, cfg.ClusterListen)
	}
	if cio.exit != nil {
		opts.TermNotRecorded = func(err error) {
			// Raft would panic next, with a goroutine dump that names no file.
			log.Error("this control node cannot record its Raft term or vote, so it stops: "+
				"free space or mend the file system under the data directory, then start it again", "dir", string(opts.Dir), "err", err)
			_ = notifyState(cio, "STOPPING=1")
			cio.exit(exitDataDir)
		}
	}
	d, err := daemon.Open(ctx, opts)
	if err == nil && ctx.Err() != nil {
		// The signal came as Open finished its last steps, which do not wait on
		// ctx: this node stops as one stopped while starting does, and tells
		// systemd nothing of being ready (it said READY=1, then stopped, exit 0).
		d.Close()
		_ = notifyState(cio, "STOPPING=1")
		return fmt.Errorf("%w while starting, before this control node was ready; nothing is left half-done: start it again with `meshctl serve --data %s`",
			context.Cause(ctx), opts.Dir)
	}
	if err != nil {
		if ctx.Err() != nil {
			_ = notifyState(cio, "STOPPING=1")
			return fmt.Errorf("%w while starting, before this control node was ready (%v); nothing is left half-done: start it again with `meshctl serve --data %s`",
				context.Cause(ctx), err, opts.Dir)
		}
		if errors.Is(err, syscall.EADDRNOTAVAIL) {
			// The machine was renumbered: editing mesh.json would make the node
			// serve where nobody looks, so say what does work.
			return fmt.Errorf("%w\nan address this control node serves on is not this machine's any more (was it renumbered?; waited %s for it to appear, --address-wait). "+
				"It is in the node's certificate, in the replicated state and in every host's list of brokers: give the machine that address back, "+
				"as a second address if need be (ip addr add %s dev INTERFACE), start serve again, "+
				"then move the node as docs/operations.md says (\"Moving a control node to another address\")", err, addressWait, hostPrefix(err))
		}
		if errors.Is(err, syscall.EADDRINUSE) {
			// "Give another address" does not help a control node, whose addresses
			// are in its certificate and the replicated state; the likely holder is
			// its own serve, still running from another directory (a restore with
			// the old one not stopped first: a walkthrough).
			return fmt.Errorf("%w\nif it is a meshctl serve of this control node (running from another data directory: a restore or a copy started with the old serve still running), stop that one first; "+
				"another address, for a control node, is a move: its addresses are in its certificate and the replicated state (docs/operations.md, \"Moving a control node to another address\")", err)
		}
		return err
	}
	cfg := d.Config()
	ready.Store(true)
	if err := notifyState(cio, fmt.Sprintf("READY=1\nSTATUS=control node %s of mesh %s; broker on %s", cfg.Node, cfg.Mesh, d.BrokerAddr())); err != nil {
		log.Warn("could not tell systemd the control node is ready", "err", err)
	}
	// The stop is said as it begins, to the log and to systemd, not once the
	// actors have ended (a leader hands its leadership over first): meanwhile
	// systemd showed the unit as still running, as an agent's was (a review).
	said := make(chan struct{})
	sayStopping := context.AfterFunc(ctx, func() {
		defer close(said)
		log.Info("control node stopping", "reason", context.Cause(ctx).Error())
		_ = notifyState(cio, "STOPPING=1")
	})
	err = d.Run(ctx)
	if sayStopping() {
		// Stopped for another cause than a signal (removed, a fatal error).
		_ = notifyState(cio, "STOPPING=1")
	} else {
		// Said before "control node stopped", however the goroutines ran (a
		// review: it could come after, or be lost with the process).
		<-said
	}
	d.Close()
	log.Info("control node stopped")
	return err
}

// logFormatFlag is the log format --log-format and its alias --log-json ask for
// (formatSet: --log-format was given).
func logFormatFlag(format string, logJSON, formatSet bool) (string, error) {
	if format != "text" && format != "json" {
		return "", usagef("--log-format %q: use text or json", format)
	}
	if logJSON {
		if formatSet && format != "json" {
			return "", usagef("--log-json and --log-format %s disagree; --log-json is the same as --log-format json", format)
		}
		return "json", nil
	}
	return format, nil
}

// newLogger is the daemon's logger: slog's text or JSON handler on w.
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level %q: use debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}
