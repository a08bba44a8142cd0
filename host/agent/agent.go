// Package agent is the enrolled host's run loop: it stays connected to the mesh as its
// node, verifies every envelope it receives (declarations, keyrings, the revocation
// notice) before acting on it, applies declarations, persists what it applied, and
// reports status.
//
// One goroutine owns the agent's state; the NATS callbacks only hand events to it, so
// a declaration is never applied concurrently with another and the applied version
// only moves forward.
package agent

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"mesh/declarations"
	"mesh/host/apply"
	"mesh/host/busyaddr"
	"mesh/host/hooks"
	"mesh/host/identity"
	"mesh/host/link"
	"mesh/host/state"
	"mesh/host/statedir"
	"mesh/host/wire"
)

// Options configure an agent.
type Options struct {
	StateDir string
	// Agent is what the status reports name the agent (enrol.Agent(version): the
	// build the mesh shows operators, which tells them how far an upgrade went);
	// "" names none.
	Agent string
	// Version and Revision are this build's (`meshhost version`; "" when it recorded
	// none): mesh_agent_build_info says them.
	Version, Revision string
	// Root is the managed root the file applier keeps in line with declarations.
	Root   string
	Logger *slog.Logger
	// Heartbeat is how often the agent reports when nothing happens; 15s by default.
	Heartbeat time.Duration
	// BrokerPing is how often the agent pings its broker, to leave one whose
	// process stopped reading; link.PingInterval (20s) by default.
	BrokerPing time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Applier applies declarations; nil means a FileApplier on Root.
	Applier apply.Applier
	// AuthFailureLimit is how many consecutive authorization refusals make the agent
	// say that the mesh keeps refusing its key (an error in its log, and OnRefused),
	// again after as many more; 5 by default. It goes on trying: a refusal is not
	// signed, and a machine with a leaf of the mesh CA (a control node since
	// removed) passes the pin check and can refuse as often as it likes. Only the
	// mesh's signed revocation notice stops the agent (ErrRevoked), and the mesh
	// sends it to a revoked key that connects.
	AuthFailureLimit int
	// Skew is the clock tolerance for declaration validity; 0 means the default.
	Skew time.Duration
	// Hooks are the commands this host's local configuration runs after files
	// change; a declaration can never add one.
	Hooks hooks.Config
	// HooksFile is where Hooks were read from (--hooks; "" none): `meshhost hooks
	// retry` reads it again, so that a hook whose command was mended in the file
	// runs as mended (it ran as read when the agent started: a walkthrough).
	HooksFile string
	// MetricsTextfile, when set, is a file the agent writes its metrics to every
	// TextfileInterval, for the textfile collector of the node exporter the host
	// runs (CheckTextfile), and removes as it stops.
	MetricsTextfile string
	// MetricsListen, when set, is where /metrics, /healthz and /readyz are served
	// (ip:port).
	MetricsListen string
	// CheckFiles is how often the agent compares the managed root with the applied
	// declaration and puts back, running their hooks, the files changed or removed
	// by hand since (checkFiles); 0 means DefaultCheckFiles, a negative value never
	// (then only a new declaration or the mesh's re-signed copy, every 12 hours,
	// puts them back).
	CheckFiles time.Duration
	// RetryMin and RetryMax bound the backoff between attempts to apply a
	// declaration that failed to apply (a local fault: a file where a directory must
	// go, a full disk); 0 means 1 second and 5 minutes.
	RetryMin, RetryMax time.Duration
	// ReturnHome is how often, while connected to a broker other than the first in
	// its order (failed over from it), the agent moves back to that one; the wait
	// doubles, up to an hour, while the moves do not end there. 0 never moves back.
	ReturnHome time.Duration
	// ExtraBrokers are addresses (ip:port) tried after every broker the mesh's list
	// names: for a host whose known brokers are all gone (switched off while the
	// control nodes were replaced). Each must still present the mesh's CA, and the
	// list the mesh signs replaces them once the agent reaches it.
	ExtraBrokers []string
	// Socket, when set, is where the agent answers `meshhost hooks retry`
	// (SocketPath: in the state directory, which the caller has locked).
	Socket string
	// OnSynced, if set, is called each time the mesh acknowledged a sync: the
	// agent is connected and the mesh has sent it its current state (which it
	// verifies as it arrives). The first call means the agent is up; meshhost tells
	// the service manager so. While no control node answers, the agent keeps
	// trying and does not call it.
	OnSynced func()
	// OnWaiting, if set, is called with the reason each time an attempt to
	// connect fails (the first connection, or again after a disconnection), or a
	// sync is not answered: the agent runs without the mesh meanwhile (its hooks,
	// its socket, its retries) and keeps trying.
	// meshhost tells the service manager it is up then, so that a mesh down at
	// boot does not have the agent restarted again and again.
	OnWaiting func(error)
	// OnRefused, if set, is called with an error wrapping ErrIdentityRefused each
	// time the refusals in a row reach a multiple of AuthFailureLimit; the agent goes
	// on trying. OnSynced follows once the mesh accepts the key again.
	OnRefused func(error)
}

// ErrRevoked is returned by Run when the mesh revoked this node.
var ErrRevoked = errors.New("this node was revoked by the mesh; its identity is no longer accepted")

// ErrIdentityRefused is what Options.OnRefused is told when the mesh keeps refusing
// the node's key without a signed notice.
var ErrIdentityRefused = errors.New("the mesh refuses this node's identity")

// RevokedError carries the signed revocation notice's time.
type RevokedError struct{ At time.Time }

func (e *RevokedError) Error() string {
	return fmt.Sprintf("%v (revoked at %s)", ErrRevoked, e.At.Format(time.RFC3339))
}

func (e *RevokedError) Unwrap() error { return ErrRevoked }

// Agent is an enrolled node's agent.
type Agent struct {
	o       Options
	log     *slog.Logger
	id      identity.Identity
	kp      *identity.KeyPair
	applied state.Applied
	keyring declarations.Keyring
	keys    []ed25519.PublicKey
	applier apply.Applier
	// store persists applied: in place, one write and one flush per change.
	store *state.Store
	// unsaved says the last save of applied failed (saveAgain tries again).
	unsaved bool
	// stateGone is the state directory's disappearance last logged (a
	// *state.DirGoneError's text): said once, not at every heartbeat's try.
	stateGone string
	// askApplied says each sync asks the mesh for the applied declaration again,
	// until a copy of it verified and is kept (keep): a managed file was missing
	// from the root as the agent started (the copy puts it back: putBack), the file
	// check has no usable copy (none kept yet, or the kept one expired or predates
	// the keyring), or a copy was refused for its validity window (a clock wrong).
	askApplied bool
	// syncWanted says the loop starts a sync once the envelope in hand is handled:
	// the declaration that failed to apply was refused when tried again, and only
	// the mesh's copy can bring it now (retryRefused).
	syncWanted bool
	// kept is the signed envelope of the applied declaration (the copy that
	// verified last), which checkFiles applies again; nil before one arrived or was
	// read from KeptFileName (keptLoaded: tried once). keptSaved says that file
	// holds it.
	kept       []byte
	keptFiles  []apply.File // kept's files, once verified
	keptUntil  time.Time    // kept's expiry, once verified
	keptSaved  bool
	keptLoaded bool
	// rootMarkFailed: marking the managed root failed once, and was said then.
	rootMarkFailed bool
	// euid is the agent's effective user: root's marks the managed root in a
	// namespace only it may write (rootmark.go).
	euid int
	// notKept tells apart the last failure to write kept to KeptFileName
	// (failureKey), logged once; "" once written.
	notKept string
	// off is why the file check cannot put files back (no usable copy), and
	// since when; zero while it can.
	off checkOffState
	// issuedAhead says the file check's last copy verified only because it is the
	// applied declaration, issued beyond the tolerance in this clock's future
	// (logged once: noteIssuedAhead).
	issuedAhead bool
	// checkFailed is what the file check's last failure to put files back
	// concerned (the path), so that it is reported once, not at every check.
	checkFailed string
	// refusals bounds the lines of envelopes refused (fail).
	refusals refusalLog

	// msgs is where nats.go's read loop hands declarations over directly (a
	// channel subscription, not a callback goroutine in between: one wakeup less
	// per declaration). A full queue is a slow consumer: see the error handler.
	msgs   chan *nats.Msg
	events chan event
	// hookJobs hands the hook worker what to run; hookWaiting is what waits for it
	// while the worker is busy (merged, so a burst of declarations runs hooks once).
	hookJobs    chan hookRun
	hookWaiting *hookRun
	// hookBusy: the worker holds a batch; hookBusyWaiters want its outcome.
	hookBusy        bool
	hookBusyWaiters []hooksWaiter
	// hookFailed are the paths of hooks that failed and are not queued again: owed
	// until an operator's action runs them (retryHooks, a declaration, a restart).
	hookFailed []string
	// hookErr and hookErrVersion are the last hook failure reported, reported
	// again should another error take its place while its hooks are still owed.
	hookErr        string
	hookErrVersion uint64
	// hookRetries are `meshhost hooks retry` requests from the agent's socket.
	hookRetries chan chan<- HooksOutcome
	// retry is the declaration whose apply failed, tried again later.
	retry applyRetry
	// applyOwed are the paths whose hooks a failed apply that could not be rolled
	// back owes (its files may have changed): the next apply that succeeds runs
	// them with its own changes. A restart runs them from HooksPending.
	applyOwed []string
	// conn is the connection to the mesh once made (nil before): the loop's.
	conn *nats.Conn
	// replyTo is the inbox the status reports name as their reply subject, where
	// the mesh says what it has to tell the node (statusAnswered); "" for none.
	replyTo string
	// stale is whether the log said last that the applied declaration expired.
	stale bool
	// received counts the envelopes that arrived on the declaration subject.
	received uint64
	// answering is what the sync whose answer the envelope in hand is (tagged with
	// its tag) asked, nil otherwise: what crossedSync judges by.
	answering *syncAsked
	stats     stats
}

type event struct {
	connected bool
	err       error
}

// New loads the identity and the applied state. Each way they can be unusable is its
// own error; none of them is ever answered by starting from scratch. A state
// directory another user owns or group or others may write is refused
// (statedir.ErrUnsafe); an absent one is left to the identity to explain (not
// enrolled).
func New(o Options) (*Agent, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Heartbeat == 0 {
		o.Heartbeat = 15 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.AuthFailureLimit == 0 {
		o.AuthFailureLimit = 5
	}
	if o.CheckFiles == 0 {
		o.CheckFiles = DefaultCheckFiles
	}
	if o.RetryMin == 0 {
		o.RetryMin = time.Second
	}
	if o.RetryMax == 0 {
		o.RetryMax = 5 * time.Minute
	}
	if err := statedir.Check(o.StateDir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	o.Hooks = o.Hooks.WithGroupFile(filepath.Join(o.StateDir, HookGroupName))
	id, kp, err := identity.LoadKeyPair(o.StateDir)
	if err != nil {
		return nil, err
	}
	built := false
	defer func() {
		if !built {
			kp.Wipe()
		}
	}()
	if err := identity.MakePrivate(o.StateDir); err != nil {
		var loose *identity.ExposedError
		if !errors.As(err, &loose) {
			return nil, err
		}
		// The file is this user's (identity.Load refuses another's): made private,
		// so that nobody reads the key from now on. Whoever could before may hold it.
		if loose.Err != nil {
			o.Logger.Warn("the identity file is readable by other users and could not be made private: it holds this node's private key; chmod 600 it",
				"file", loose.Path, "mode", loose.Mode.String(), "err", loose.Err)
		} else {
			o.Logger.Warn("the identity file was readable by other users and is private now: it holds this node's private key, which they could have copied; "+
				"if they are not trusted, have this node revoked (meshctl revoke) and enrol it again",
				"file", loose.Path, "mode", loose.Mode.String())
		}
	}
	if removed, err := identity.RemoveFinishedPending(o.StateDir, id); removed {
		o.Logger.Info("removed the draft key of the finished enrolment, which held this node's private key a second time", "file", identity.PendingPath(o.StateDir))
	} else if err != nil {
		o.Logger.Warn("the draft key of the finished enrolment holds this node's private key a second time and could not be removed: remove it", "file", identity.PendingPath(o.StateDir), "err", err)
	}
	applied, store, err := state.Open(o.StateDir)
	if err != nil {
		return nil, err
	}
	if err := store.MarkLegacy(); err != nil {
		o.Logger.Warn("the legacy state file is not marked as replaced; tried again at the next start", "err", err)
	}
	kr, err := trustedKeyring(id, applied)
	if err != nil {
		return nil, err
	}
	keys, err := kr.PublicKeys()
	if err != nil {
		return nil, err
	}
	app := o.Applier
	if app == nil {
		if o.Root == "" {
			return nil, errors.New("a managed root (--root) is required")
		}
		// The applier writes what the mesh declares there, as root: whoever could
		// replace a directory above it could aim those writes anywhere. Judged
		// again at each apply that opens a directory not judged before: parts of
		// the path missing now may be made by another user later.
		checkRoot := func(path string) error { return statedir.CheckRoot("the managed root", path) }
		if err := checkRoot(o.Root); err != nil {
			return nil, err
		}
		if err := outside(o.StateDir, o.Root); err != nil {
			return nil, err
		}
		// The root as the agent starts is the one: a file system unmounted from it
		// later uncovers another directory at the same path, which the applier then
		// refuses (apply.ErrRootGone) rather than fill.
		guard := &apply.RootGuard{Check: checkRoot}
		if err := guard.Accept(o.Root); err != nil {
			return nil, err
		}
		app = apply.FileApplier{Root: o.Root, Chown: os.Geteuid() == 0, Guard: guard}
	}
	built = true
	return &Agent{
		o: o, log: o.Logger.With("node", id.Node), id: id, kp: kp, applied: applied,
		keyring: kr, keys: keys, applier: app, store: store, euid: os.Geteuid(),
		msgs: make(chan *nats.Msg, 64), events: make(chan event, 16), hookRetries: make(chan chan<- HooksOutcome),
	}, nil
}

// trustedKeyring is the keyring the agent last accepted, or the token's key as the
// anchor (epoch 0) if it accepted none yet. The stored keyring was verified before it
// was saved; it is read back without re-verifying because its signers may have been
// retired since.
func trustedKeyring(id identity.Identity, a state.Applied) (declarations.Keyring, error) {
	anchor := declarations.Keyring{Mesh: id.Mesh, Epoch: 0, Keys: id.SigningKeys}
	if len(a.Keyring) == 0 {
		return anchor, nil
	}
	var env declarations.Envelope
	if err := json.Unmarshal(a.Keyring, &env); err != nil {
		return anchor, fmt.Errorf("%s: stored keyring: %w", state.Path(""), err)
	}
	var kr declarations.Keyring
	if err := json.Unmarshal(env.Payload, &kr); err != nil {
		return anchor, fmt.Errorf("%s: stored keyring: %w", state.Path(""), err)
	}
	if kr.Mesh != id.Mesh || len(kr.Keys) == 0 {
		return anchor, fmt.Errorf("stored keyring is for mesh %q or empty", kr.Mesh)
	}
	return kr, nil
}

// Identity returns the loaded identity.
func (a *Agent) Identity() identity.Identity { return a.id }

// Applied returns the applied state (for status output and tests).
func (a *Agent) Applied() state.Applied { return a.applied }

// Run connects and serves until ctx ends (nil) or the node is revoked (ErrRevoked,
// on the mesh's signed notice only).
//
// One loop owns the agent's state. Around it: nats.go's callbacks hand it envelopes
// and connection events; a sync runs in its own goroutine so that a slow or absent
// control plane never stops the loop from verifying and reporting; the hooks run in
// a worker of their own, for the same reason.
func (a *Agent) Run(ctx context.Context) error {
	brokers := a.brokers()
	if len(brokers) == 0 {
		return errors.New("agent: the identity and the applied state name no broker")
	}
	home := newHoming(a.o.ReturnHome)
	// The pin check itself says when a broker address answers as something else: on
	// a reconnection nats.go reports that to no handler.
	base, err := link.AsNode(ctx, a.id, a.kp, a.o.Now, func(err error) {
		if link.IsClock(err) {
			// The mesh's own certificate, out of its validity by this machine's
			// clock (booted before NTP set it): not a substitution. The dials go
			// on, and succeed once the clock is right.
			a.log.Error("this machine's clock is wrong: the mesh's certificate is not valid at its time; nothing is sent until it is set, and the agent keeps trying", "now", a.o.Now().UTC().Format(time.RFC3339), "broker", brokerOf(err), "err", err)
			return
		}
		a.log.Error("a broker address answered with a certificate that is not the mesh's: refusing it and trying again", "broker", brokerOf(err), "err", err)
	})
	if err != nil {
		return err
	}
	// A broker cut off without a reset (a partition) is noticed in 15–20 s, by
	// the kernel; one that stops reading, by the pings (see link.Liveness).
	opts := append(append(base, link.Liveness(a.o.BrokerPing)...),
		nats.DontRandomize(),
		nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(reconnectDelay),
		nats.IgnoreAuthErrorAbort(),
		nats.Timeout(10*time.Second),
		nats.ReconnectHandler(func(*nats.Conn) { a.event(event{connected: true}) }),
		nats.ReconnectToServer(home.pick),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			now := a.o.Now()
			a.stats.set(func(s *stats) {
				s.connected, s.synced, s.since = false, false, now
				if err != nil {
					s.linkErr = err.Error()
				}
			})
			if err != nil {
				a.log.Warn("disconnected from the mesh; reconnecting", "err", err)
			}
		}),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) { a.event(event{err: err}) }),
		// Authorization refusals while reconnecting arrive here.
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) { a.asyncError(sub, err) }),
	)
	// The endpoints answer from the start, not connected yet included.
	a.publishState()
	start := a.o.Now()
	a.stats.set(func(s *stats) { s.since, s.linkErr = start, "not connected yet" })
	if a.o.MetricsListen != "" {
		// An address another process holds does not keep the agent from its
		// job: any local user may bind a loopback port first, and would otherwise
		// keep the agent down (systemd restarting it into the same failure).
		ln, inUse, err := busyaddr.Listen(a.o.MetricsListen)
		if err != nil && !inUse {
			return fmt.Errorf("--metrics-listen %s: %w", a.o.MetricsListen, err)
		}
		httpCtx, stopHTTP := context.WithCancel(ctx)
		var served sync.WaitGroup
		served.Add(1)
		go func() {
			defer served.Done()
			if ln == nil {
				a.log.Error("the metrics endpoint's address is held by another process: the agent runs on without it, and serves it as soon as the address is free. "+
					"Until then, what answers there is not this agent: if that process is not one of yours, another user may be answering health checks and scrapes in the agent's place",
					"listen", a.o.MetricsListen, "err", err)
				if ln = busyaddr.Await(httpCtx, a.o.MetricsListen, metricsRetry); ln == nil {
					return
				}
				a.log.Info("the metrics endpoint is served now", "listen", a.o.MetricsListen)
			}
			a.serveHTTP(httpCtx, ln)
		}()
		defer served.Wait()
		defer stopHTTP()
	}
	if a.o.MetricsTextfile != "" {
		fileCtx, stopFiles := context.WithCancel(ctx)
		var written sync.WaitGroup
		written.Add(1)
		go func() {
			defer written.Done()
			a.writeTextfiles(fileCtx, a.o.MetricsTextfile, TextfileInterval)
		}()
		defer written.Wait()
		defer stopFiles()
	}
	// nc is nil until the first connection; closed once the workers, whose syncs
	// use it, are done.
	var nc *nats.Conn
	defer func() {
		if nc != nil {
			nc.Close()
		}
	}()
	var workers sync.WaitGroup
	defer workers.Wait()
	loopCtx, stop := context.WithCancel(ctx)
	defer stop()

	// Everything that needs no mesh starts before the first connection: a host
	// fixed by hand while the control plane (or its own network) is down runs its
	// owed hooks and answers `meshhost hooks retry`; their outcome is reported once
	// the mesh is reached.
	hookDone := make(chan hookRun, 1)
	a.hookJobs = make(chan hookRun, 1)
	workers.Add(1)
	go func() { defer workers.Done(); a.runHooks(loopCtx, hookDone) }()
	// A hook an agent ran when it was killed may run still: it goes before the
	// owed hooks run it again, or the two ran side by side.
	if killed, err := hooks.KillLeftover(filepath.Join(a.o.StateDir, HookGroupName)); err != nil {
		a.log.Warn("could not check for a hook left running by the agent before", "err", err)
	} else if killed {
		a.log.Warn("a hook the agent ran before it was killed was still running: killed it; the hooks owed run now")
	}
	a.runOwedHooks()
	a.askApplied = a.managedMissing() || a.noKeptCopy()
	if !a.applied.NextAttempt.IsZero() && a.retry.raw == nil {
		// The declaration that failed to apply is not kept across a restart: no
		// attempt is due until the mesh sends it again, at the first sync.
		a.log.Info("the declaration that failed to apply is tried again once the mesh sends it again, at the first sync", "version", a.applied.LastErrorVersion)
		a.applied.NextAttempt = time.Time{}
		a.save()
	}
	if a.o.Socket != "" {
		// Without it the agent still runs; only `meshhost hooks retry` cannot reach
		// it (a restart runs the owed hooks too).
		if ln, err := listenSocket(a.o.Socket); err != nil {
			a.log.Warn("no socket for meshhost hooks retry; restarting the agent runs the owed hooks instead", "socket", a.o.Socket, "err", err)
		} else {
			workers.Add(1)
			go func() { defer workers.Done(); a.serveSocket(loopCtx, ln) }()
		}
	}

	a.log.Info("agent running", "mesh", a.id.Mesh, "brokers", a.brokers(), "root", a.o.Root, "applied_version", a.appliedText())
	// The first connection is made beside the loop, which hands it over.
	first := make(chan *nats.Conn)
	workers.Add(1)
	go func() {
		defer workers.Done()
		c, err := a.connect(loopCtx, link.URLs(brokers), opts)
		if err != nil {
			return // asked to stop before the first connection
		}
		select {
		case first <- c:
		case <-loopCtx.Done():
			c.Close()
		}
	}()
	beat := time.NewTicker(a.o.Heartbeat)
	defer beat.Stop()
	sy := &syncer{a: a, done: make(chan syncResult, 1)}
	homeTimer := time.NewTimer(home.interval())
	if home.every <= 0 {
		homeTimer.Stop()
	}
	defer homeTimer.Stop()
	check := newCheckTimer(a.o.CheckFiles)
	defer check.stop()
	// A copy of the applied declaration not written yet (applied since the last
	// check) is written as the agent stops, for the check after the restart.
	defer func() { _ = a.saveKept() }()
	authFailures := 0
	var problems problemLog
	for {
		select {
		case <-ctx.Done():
			return nil
		case c := <-first:
			nc, a.conn, sy.nc = c, c, c
			sub, err := nc.ChanSubscribe(a.id.Subjects.Declarations, a.msgs)
			if err != nil {
				return fmt.Errorf("subscribe %s: %w", a.id.Subjects.Declarations, err)
			}
			defer sub.Unsubscribe()
			var stop func()
			a.replyTo, stop = a.statusInbox(nc)
			defer stop()
			a.event(event{connected: true}) // sync and report
		case ev := <-a.events:
			switch {
			case nc == nil:
				// Only a connection made sends events.
			case ev.connected:
				authFailures = 0
				problems.reset()
				now, broker := a.o.Now(), nc.ConnectedUrlRedacted()
				a.stats.set(func(s *stats) { s.connected, s.broker, s.since, s.linkErr = nc.IsConnected(), broker, now, "" })
				a.log.Info("connected to the mesh", "broker", nc.ConnectedUrlRedacted())
				if home.arrived(a.homeURL(nc), nc.ConnectedUrl()) && home.every > 0 {
					homeTimer.Reset(home.interval())
				}
				sy.backoff = 0
				sy.start(loopCtx, &workers)
				a.report(nc)
			case link.IsAuthRefused(ev.err):
				authFailures++
				a.authRefused(authFailures)
				a.linkFailed(ev.err)
			case link.IsSubstituted(ev.err), link.IsClock(ev.err):
				// Logged by the pin check, which saw it first.
				a.linkFailed(ev.err)
			case ev.err != nil:
				if ok, held := problems.allow(ev.err.Error(), a.o.Now()); ok {
					a.log.Warn("connection problem", append([]any{"err", ev.err}, heldBack(held)...)...)
				}
				a.linkFailed(ev.err)
			}
		case r := <-sy.done:
			sy.finished(loopCtx, r)
		case <-sy.retry():
			sy.start(loopCtx, &workers)
		case <-sy.checkDue():
			sy.checkArrived()
		case m := <-a.msgs:
			if err := a.onEnvelope(ctx, m, sy); err != nil {
				return err
			}
			a.report(nc)
			sy.arrived()
			sy.startIfWanted(loopCtx, &workers)
		case h := <-hookDone:
			a.hooksFinished(h)
			a.report(nc)
		case reply := <-a.hookRetries:
			a.retryHooks(reply)
			a.report(nc)
		case <-a.retry.due():
			a.log.Info("trying again to apply the declaration that failed", "version", a.retry.version, "attempt", a.retry.attempt+1)
			if err := a.handle(ctx, a.retry.raw); err != nil {
				return err
			}
			a.report(nc)
			sy.startIfWanted(loopCtx, &workers)
		case <-beat.C:
			a.saveAgain()
			a.noticeStateGone()
			if a.noteStale() && nc != nil && a.clockMayHelp() {
				// The copy the mesh holds may well be valid: this node's clock
				// stepped forward past the expiry of the one it kept (a machine
				// resumed, its clock set by NTP), having refused the fresh one
				// while its clock was behind; or stepped back (a clock that ran
				// ahead, set right), having refused it as expired. Nothing else
				// would send it before the next refresh, half the validity away.
				a.log.Info("this node's clock moved across the applied declaration's expiry: asking the mesh for its current copy", "version", a.applied.Version, "stale", a.stale)
				sy.start(loopCtx, &workers)
			}
			a.report(nc)
		case <-check.C():
			out := a.checkFiles(ctx)
			if out.report {
				a.report(nc)
			}
			if out.ask && nc != nil {
				sy.start(loopCtx, &workers)
			}
			check.next(out.putBack)
			if check.streak > 1 {
				a.log.Warn("managed files keep changing on this host: put back at every check; something here writes them (a service, a package's script, a hook)", "checks_in_a_row", check.streak, "next_check_in", check.wait.Round(time.Second))
			}
		case <-homeTimer.C:
			// The first of the mesh's list as it stands: a control node removed since
			// the connection was made is no longer anyone's home.
			home1 := a.homeURL(nc)
			if home1 != "" && home.look(home1, nc.ConnectedUrl(), nc.Servers()) {
				a.log.Info("moving back to this node's first broker", "broker", home1, "from", nc.ConnectedUrlRedacted())
				if err := nc.ForceReconnect(); err != nil {
					a.log.Warn("could not move back to the first broker", "err", err)
				}
			}
			homeTimer.Reset(home.interval())
		}
	}
}

// homeURL is this node's home broker as nats.go names it: the first of the mesh's
// list as it stands (a control node removed since the connection was made is no
// longer anyone's home); "" with no connection or no list.
func (a *Agent) homeURL(nc *nats.Conn) string {
	if b := a.brokers(); len(b) > 0 && nc != nil {
		return link.URLs(b[:1])
	}
	return ""
}

// connect makes the first connection itself, with backoff, because nats.go does not
// report authorization refusals while it retries a first connection: the agent must
// count them to tell a revoked identity from a network that is down. What keeps
// failing is logged as a lost connection's problems are (problemLog): an agent
// started during an outage of days logged a line every 30 s, burying the one line
// that says it is stale. Its own problemLog: it runs beside the loop, which resets
// its own once connected.
func (a *Agent) connect(ctx context.Context, urls string, opts []nats.Option) (*nats.Conn, error) {
	wait := time.Second
	refusals := 0
	var problems problemLog
	for {
		nc, err := nats.Connect(urls, opts...)
		if err == nil {
			return nc, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, nats.ErrNoServers) {
			// nats.go says this when every address refused the connection.
			err = fmt.Errorf("every broker refused the connection (none listens at %s: its control node is down, or listens elsewhere): %w", urls, err)
		}
		a.linkFailed(err)
		switch {
		case link.IsAuthRefused(err):
			refusals++
			a.authRefused(refusals)
		case link.IsSubstituted(err), link.IsClock(err):
			// Logged by the pin check, which saw it first.
		default:
			if ok, held := problems.allow(err.Error(), a.o.Now()); ok {
				a.log.Warn("cannot reach the mesh yet; retrying", append([]any{"err", err, "in", wait}, heldBack(held)...)...)
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(wait*2, 30*time.Second)
	}
}

// linkFailed notes why the agent is not connected, for `meshhost status` and
// OnWaiting.
func (a *Agent) linkFailed(err error) {
	down := false
	a.stats.set(func(s *stats) {
		if down = !s.connected; down {
			s.linkErr = err.Error()
		}
	})
	if down && a.o.OnWaiting != nil {
		a.o.OnWaiting(err)
	}
}

// authRefused notes the n-th authorization refusal in a row: a warning each time,
// and at every AuthFailureLimit-th an error and OnRefused.
func (a *Agent) authRefused(n int) {
	if n%a.o.AuthFailureLimit != 0 {
		a.log.Warn("the mesh refused this node's key (or had no room for another host, or refuses the key for a while: it logged in too often, or was disconnected for going past its budget); trying again", "in_a_row", n)
		return
	}
	err := fmt.Errorf("%w: refused %d times in a row, without the signed notice a revoked node is sent. "+
		"The control plane may have lost this node (restored from an older backup), or a machine holding a certificate of the mesh answers at a broker's address, "+
		"or every control node reached holds as many hosts as its open-file limit allows (its log says so: raise its LimitNOFILE or add a control node), "+
		"or a broker refuses this key for a while, up to a minute at a time: it logged in too often there, or the mesh disconnected it for going past its budget (another process, or a second machine, using this node's key; the control node's log says node_login_rate or node_cooldown). "+
		"The agent keeps trying; if the control plane lost this node, adopt this machine again: %s", ErrIdentityRefused, n, identity.StartOver(a.o.StateDir))
	a.log.Error("the mesh keeps refusing this node's key", "err", err)
	if a.o.OnRefused != nil {
		a.o.OnRefused(err)
	}
}

// brokers is where the agent connects: the brokers of the signed membership it
// accepted last, or, before any, the identity's. The list is rotated by a hash of the
// node id, so that a fleet spreads over the brokers while each node keeps a stable
// order (a broker that drops a node is tried again last).
func (a *Agent) brokers() []string {
	list := a.applied.Brokers
	if len(list) == 0 {
		list = a.id.Brokers
	}
	out := spread(list, a.id.Node)
	for _, b := range a.o.ExtraBrokers {
		if !slices.Contains(out, b) {
			out = append(out, b)
		}
	}
	return out
}

// reconnectDelay is how long the agent waits after its attempts-th pass over every
// broker it knows failed: 2 s, doubling up to 15 s, each wait drawn at random from
// its upper half (1–2 s, 2–4 s, 4–8 s, then 7.5–15 s). The first wait is not
// shorter on purpose: a control node restarted with a fleet connected needs about a
// second to serve its API again. In the fleet benchmark, with a 250 ms first wait
// 10,000 TLS handshakes arrived in that second and the API answered 5.5 and 13.5 s
// after the kill, against 0.9–1.2 s with this one (docs/benchmarks.md). Drawn at
// random, the fleet comes back spread out instead of in lockstep, and a mesh down
// for long is not hammered by every host at once.
func reconnectDelay(attempts int) time.Duration {
	const first, ceiling = 2 * time.Second, 15 * time.Second
	d := ceiling
	if attempts >= 1 && attempts <= 3 { // from the 4th on, 2 s << 3 = 16 s is beyond the ceiling
		d = min(first<<(attempts-1), ceiling)
	}
	return d/2 + rand.N(d/2)
}

// spread rotates list by a hash of key.
func spread(list []string, key string) []string {
	if len(list) < 2 {
		return slices.Clone(list)
	}
	h := fnv.New32a()
	h.Write([]byte(key))
	i := int(h.Sum32() % uint32(len(list)))
	return append(slices.Clone(list[i:]), list[:i]...)
}

// asyncError handles what nats.go reports outside a call: a declaration dropped
// because the queue was full (nats.go calls that a slow consumer) asks for a sync,
// which fetches the current declaration instead; anything else goes to the loop.
func (a *Agent) asyncError(sub *nats.Subscription, err error) {
	if errors.Is(err, nats.ErrSlowConsumer) && sub != nil && sub.Subject == a.id.Subjects.Declarations {
		if ok, held := a.refusals.allow("queue full", a.o.Now()); ok {
			a.log.Warn("declaration queue full; will sync", heldBack(held)...)
		}
		a.event(event{connected: true})
		return
	}
	a.event(event{err: err})
}

func (a *Agent) event(ev event) {
	select {
	case a.events <- ev:
	default:
	}
}

func (a *Agent) appliedText() string {
	if !a.applied.HaveApplied {
		return "none"
	}
	return fmt.Sprintf("v%d", a.applied.Version)
}

// syncResult is the outcome of one sync request.
type syncResult struct {
	resp wire.SyncResponse
	err  error
	// tagged: the acknowledgement carries the sync's tag, so the mesh tagged the
	// envelopes it sent for it.
	tagged bool
}

// syncer asks the mesh for the node's current state: the mesh publishes the keyrings
// the agent lacks and its declaration on the declaration subject, where the loop
// verifies them like any push, and acknowledges on the node's inbox with how many it
// sent. A sync that gets no acknowledgement (no control node serving yet, a timeout,
// the mesh unable to answer), or whose envelopes do not all arrive (a subscription
// that had not yet reached the broker the control plane publishes on), is tried
// again with capped exponential backoff until one succeeds.
//
// Each sync is tagged (wire.SyncHeader): a declaration an operator pushes while a
// sync is on its way must not stand in for one of the sync's envelopes that was
// lost, or the agent would count itself synced without, say, the mesh's new list
// of brokers, and not ask again until its next reconnection.
type syncer struct {
	a        *Agent
	nc       *nats.Conn
	done     chan syncResult
	inFlight bool
	again    bool // a sync was asked for while one was in flight
	backoff  time.Duration
	timer    *time.Timer
	// seq numbers the syncs; tag is the current one's, as sent, and asked what
	// it asked.
	seq   uint64
	tag   string
	asked syncAsked
	// base is the envelope count when the sync started, and tagged the count of
	// envelopes carrying its tag; byTag says the mesh tags them (an older control
	// plane does not: then every envelope counts). expect is how many must arrive.
	base, tagged uint64
	byTag        bool
	expect       uint64
	check        *time.Timer
}

// syncAsked is what a sync asked: its request, and the digest of the applied
// declaration's body the node held then (held: false before any, or when the state
// holds no digest it can read).
type syncAsked struct {
	req        wire.SyncRequest
	bodyDigest [32]byte
	held       bool
}

// askSync is what a sync sent now asks.
func (a *Agent) askSync() syncAsked {
	q := syncAsked{req: a.syncRequest()}
	// Decoded, not compared as text: the state file takes the digest in either
	// letter case (a review).
	if b, err := hex.DecodeString(a.applied.BodyDigest); err == nil && len(b) == len(q.bodyDigest) {
		copy(q.bodyDigest[:], b)
		q.held = true
	}
	return q
}

// syncEnvelopeGrace is how long after its acknowledgement a sync's envelopes may
// still arrive.
const syncEnvelopeGrace = 2 * time.Second

// Sync backoff bounds.
const (
	syncFirstRetry = 500 * time.Millisecond
	syncMaxRetry   = 30 * time.Second
	syncTimeout    = 15 * time.Second
)

func (s *syncer) retry() <-chan time.Time {
	if s.timer == nil {
		return nil
	}
	return s.timer.C
}

func (s *syncer) start(ctx context.Context, workers *sync.WaitGroup) {
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	if s.inFlight {
		s.again = true
		return
	}
	if s.check != nil {
		s.check.Stop()
		s.check = nil
	}
	if !s.nc.IsConnected() {
		// Sent now, the request would wait in nats.go's reconnection buffer and
		// reach the mesh, with every other one made meanwhile, once reconnected:
		// an outage of an hour, dozens of syncs a host, each answered with its
		// envelopes. The reconnection starts a sync of its own.
		return
	}
	s.inFlight = true
	s.seq++
	s.tag, s.base, s.tagged, s.byTag = strconv.FormatUint(s.seq, 10), s.a.received, 0, false
	tag := s.tag
	s.asked = s.a.askSync()
	sr := s.asked.req
	req, _ := json.Marshal(sr)
	s.a.log.Debug("sync asked", "tag", tag, "applied_version", sr.AppliedVersion, "keyring_epoch", sr.KeyringEpoch,
		"membership_version", sr.MembershipVersion, "asks_applied_copy", sr.HaveApplied && sr.AppliedExpiresAt.IsZero())
	workers.Add(1)
	go func() {
		defer workers.Done()
		rctx, cancel := context.WithTimeout(ctx, syncTimeout)
		defer cancel()
		var r syncResult
		msg, err := s.nc.RequestMsgWithContext(rctx, &nats.Msg{Subject: s.a.id.Subjects.Sync, Data: req,
			Header: nats.Header{wire.SyncHeader: []string{tag}}})
		if err == nil {
			r.resp, err = wire.DecodeReply[wire.SyncResponse](msg.Data)
			r.tagged = msg.Header.Get(wire.SyncHeader) == tag
		}
		r.err = err
		select {
		case s.done <- r:
		case <-ctx.Done():
		}
	}()
}

// syncRequest is what a sync asks the mesh.
func (a *Agent) syncRequest() wire.SyncRequest {
	expires := a.applied.ExpiresAt
	if a.askApplied {
		// Said to hold no copy as fresh as the mesh's: the mesh sends the applied
		// declaration, which puts missing files back and is the file check's copy.
		expires = time.Time{}
	}
	return wire.SyncRequest{V: wire.ProtocolVersion, AppliedVersion: a.applied.Version, KeyringEpoch: a.keyring.Epoch,
		MembershipVersion: a.applied.MembershipVersion, HaveApplied: a.applied.HaveApplied, AppliedExpiresAt: expires,
		// This agent's verifier takes declarations signed in a batch (decision 0034).
		BatchProofs: true,
		// Revoked, it is sent its own key's notice only.
		Key: a.id.PublicKey}
}

// startIfWanted starts a sync if the envelope just handled asked for one
// (syncWanted). Before the first connection there is nothing to send it on, and
// the first connection syncs anyway.
func (s *syncer) startIfWanted(ctx context.Context, workers *sync.WaitGroup) {
	if !s.a.syncWanted {
		return
	}
	s.a.syncWanted = false
	if s.nc != nil {
		s.start(ctx, workers)
	}
}

func (s *syncer) finished(ctx context.Context, r syncResult) {
	s.inFlight, s.byTag = false, r.tagged
	a := s.a
	switch {
	case r.err != nil:
		s.schedule("sync not answered", r.err.Error())
	case r.resp.Error != nil && r.resp.Error.Code == wire.CodeNotFound:
		// The mesh no longer knows this node: a signed notice says why, if revoked.
		a.log.Warn("the mesh does not know this node any more", "reason", r.resp.Error.Message)
	case r.resp.Error != nil:
		s.schedule("the mesh could not answer the sync", r.resp.Error.Code+": "+r.resp.Error.Message)
	case s.got() < uint64(r.resp.Sent):
		// Acknowledged, but not everything it sent has arrived yet.
		a.log.Debug("sync answered; waiting for its envelopes", "sent", r.resp.Sent, "arrived", s.got())
		s.expect = uint64(r.resp.Sent)
		if s.check != nil {
			s.check.Stop()
		}
		s.check = time.NewTimer(syncEnvelopeGrace)
	default:
		s.synced()
	}
	if s.again && ctx.Err() == nil {
		s.again = false
		if s.timer == nil {
			s.timer = time.NewTimer(0)
		}
	}
}

// synced ends a sync that delivered everything.
func (s *syncer) synced() {
	// The ask for the applied declaration (askApplied) does not end with the sync
	// but with a copy that verified (keep): a sync sent before the ask (in flight
	// then) did not deliver one, and the copy a sync that asked delivered may have
	// been refused for its validity window, this node's clock wrong. Ended here,
	// the next sync, once the clock is right, said the node held a copy as fresh
	// as the mesh's, which then sent none: no copy for the file check, and the
	// refusal reported, until the re-sign up to 12 hours later.
	s.backoff = 0
	s.a.log.Debug("synced: every envelope of the sync arrived", "tag", s.tag)
	s.a.stats.set(func(st *stats) { st.synced, st.linkErr = true, "" })
	if s.a.o.OnSynced != nil {
		s.a.o.OnSynced()
	}
}

func (s *syncer) checkDue() <-chan time.Time {
	if s.check == nil {
		return nil
	}
	return s.check.C
}

// got is how many of the current sync's envelopes have arrived.
func (s *syncer) got() uint64 {
	if s.byTag {
		return s.tagged
	}
	return s.a.received - s.base
}

// answers returns what the current sync asked if m is one of its envelopes (its tag
// on it), nil otherwise.
func (s *syncer) answers(m *nats.Msg) *syncAsked {
	if s.tag == "" || m.Header.Get(wire.SyncHeader) != s.tag {
		return nil
	}
	return &s.asked
}

// note counts m if the current sync's tag is on it. Envelopes of a sync may arrive
// before its acknowledgement (they go out first, on another connection), so every
// tagged one is counted from the sync's start.
func (s *syncer) note(m *nats.Msg) {
	if s.tag != "" && m.Header.Get(wire.SyncHeader) == s.tag {
		s.tagged++
	}
}

// arrived ends a sync acknowledged before its envelopes came as soon as the last of
// them is handled, rather than when the grace for them ends: the mesh sends the
// envelopes and the acknowledgement on different connections, so the envelopes
// often come after it, and the agent would tell its service manager it is ready up
// to syncEnvelopeGrace late.
func (s *syncer) arrived() {
	if s.check != nil && s.got() >= s.expect {
		s.check.Stop()
		s.check = nil
		s.synced()
	}
}

// checkArrived looks, once the grace is over, whether the last sync's envelopes
// arrived, and asks again if not.
func (s *syncer) checkArrived() {
	s.check = nil
	if s.got() >= s.expect {
		s.synced()
		return
	}
	s.schedule("not every envelope of the sync arrived", fmt.Sprintf("%d of %d", s.got(), s.expect))
}

func (s *syncer) schedule(what, why string) {
	if s.backoff == 0 {
		s.backoff = syncFirstRetry
	} else {
		s.backoff = min(2*s.backoff, syncMaxRetry)
	}
	s.a.log.Warn(what+"; trying again", "reason", why, "in", s.backoff.String())
	s.timer = time.NewTimer(s.backoff)
	s.a.stats.set(func(st *stats) { st.linkErr = what + ": " + why })
	if s.a.o.OnWaiting != nil {
		s.a.o.OnWaiting(errors.New(what + ": " + why))
	}
}

// onEnvelope handles m, an envelope that arrived on the node's subject: counted, and
// judged knowing whether it answers the current sync (crossedSync). Only a
// verified revocation returns an error.
func (a *Agent) onEnvelope(ctx context.Context, m *nats.Msg, sy *syncer) error {
	a.received++
	sy.note(m)
	a.answering = sy.answers(m)
	defer func() { a.answering = nil }()
	return a.handle(ctx, m.Data)
}

// handle routes one envelope to its verifier. Only a verified revocation stops the
// agent; anything that does not verify is recorded and reported, nothing more.
//
// The envelope is parsed once: the verifier goes on from the parse that routed it.
func (a *Agent) handle(ctx context.Context, raw []byte) error {
	env, err := declarations.ParseEnvelope(raw)
	if err != nil {
		a.fail(err, 0)
		return nil
	}
	typ := env.PayloadType()
	// --log-level debug follows each envelope from its arrival: what an operator
	// asks first of a host that does not converge (it logged nothing more than at
	// info, a review).
	a.log.Debug("envelope received", "type", typ, "bytes", len(raw))
	switch typ {
	case declarations.PayloadTypeDeclaration:
		a.handleDeclaration(ctx, raw, env)
	case declarations.PayloadTypeKeyring:
		a.handleKeyring(raw, env)
	case declarations.PayloadTypeMembership:
		a.handleMembership(env)
	case declarations.PayloadTypeRevocation:
		rev, err := env.VerifyRevocation(a.keys, a.id.Mesh, a.id.Node, a.id.PublicKey)
		if err != nil {
			if ok, _ := a.refusals.allow("revocation notice", a.o.Now()); ok {
				a.log.Warn("revocation notice refused: it does not verify, so the agent carries on", "err", err)
			}
			a.fail(err, 0)
			return nil
		}
		return &RevokedError{At: rev.RevokedAt}
	default:
		a.fail(fmt.Errorf("%w: unknown payload type %q", declarations.ErrMalformed, typ), 0)
	}
	return nil
}

// handleDeclaration verifies and applies env, parsed from raw (kept to try again if
// applying fails).
func (a *Agent) handleDeclaration(ctx context.Context, raw []byte, env *declarations.Parsed) {
	v, err := env.VerifyDeclaration(a.keys, a.expect())
	if err != nil {
		var (
			ve      *declarations.VersionError
			re      *declarations.ReplayedError
			ee      *declarations.ExpiredError
			ne      *declarations.NotYetValidError
			oe      *declarations.OldKeyringError
			be      *declarations.BodyError
			version uint64
		)
		switch {
		case errors.As(err, &ve):
			version = ve.Got
		case errors.As(err, &re):
			// The control plane signed this version over another body (restored
			// from an older backup): it must hear which version is not applied.
			version = re.Version
		case errors.As(err, &ee):
			// Which version a clock made refused (this node's, or the leader's):
			// reported as v0, it named a version never declared.
			version = ee.Version
		case errors.As(err, &ne):
			version = ne.Version
		case errors.As(err, &oe):
			// A redelivery from before a rotation: which version, as the others.
			version = oe.Version
		case errors.As(err, &be):
			// A body an older control plane signed and this agent's rules refuse.
			version = be.Version
		}
		if a.crossedSync(err, "declaration", func(q *syncAsked) bool {
			// The declaration the node held as it asked (the same body: a copy
			// re-signed, or asked for) or a newer one, signed under a keyring it
			// held then or since: what the sync brought, overtaken by a push. An
			// older one, or another body under the version it held, is not (a
			// review: signed under an older keyring, any version passed).
			heldOrNewer := func(version uint64, digest [32]byte) bool {
				return !q.req.HaveApplied || version > q.req.AppliedVersion ||
					version == q.req.AppliedVersion && q.held && digest == q.bodyDigest
			}
			return (ve != nil && heldOrNewer(ve.Got, ve.BodyDigest)) ||
				(oe != nil && oe.Got >= q.req.KeyringEpoch && heldOrNewer(oe.Version, oe.BodyDigest))
		}) {
			return
		}
		if a.applied.HaveApplied && version == a.applied.Version &&
			(errors.Is(err, declarations.ErrExpired) || errors.Is(err, declarations.ErrNotYetValid)) {
			// A copy of the applied declaration refused for its validity window
			// (this node's clock wrong, or the one that stamped it): the mesh is
			// asked for it at the next sync, which the clock turning starts
			// (clockMayHelp), though the node holds a copy as fresh as the mesh's.
			a.askApplied = true
		}
		if a.retry.raw != nil && bytes.Equal(raw, a.retry.raw) {
			a.retryRefused(err)
		}
		a.fail(err, version)
		return
	}
	files, err := filesOf(v)
	if err != nil {
		a.fail(err, v.Version)
		return
	}
	if v.SameAsApplied {
		// A re-signed copy of what is applied (every 12 hours): its validity moves,
		// and the files are put back as declared if someone changed or removed one
		// by hand since.
		a.log.Debug("a copy of the applied declaration verified: nothing new to apply", "version", v.Version, "expires_at", v.ExpiresAt.Format(time.RFC3339))
		if v.ExpiresAt.After(a.applied.ExpiresAt) {
			a.applied.IssuedAt, a.applied.ExpiresAt = v.IssuedAt, v.ExpiresAt
			a.save()
		}
		if a.refusedForValidity() {
			// A copy refused for its validity window (this node's clock was wrong,
			// or the one that stamped it) is no longer the news once a copy of the
			// same version verifies: left, it would tell the operator to check a
			// clock that is right until the next declaration is applied.
			a.log.Info("a copy of the applied declaration verified: the clock that made the last one refused is right again", "version", v.Version, "was", a.applied.LastErrorCode)
			a.applied.LastErrorCode, a.applied.LastError, a.applied.LastErrorVersion = "", "", 0
			a.save()
		}
		// Not an older copy (a replay by the broker), which would expire first.
		fresh := !v.ExpiresAt.Before(a.applied.ExpiresAt)
		if fresh {
			a.keep(raw, files, v.ExpiresAt)
		}
		if a.newerFailing() {
			// A newer declaration fails to apply: its retries (or its recorded
			// failure) own the root, as for the file check. Put back, this copy
			// wrote the older files over what an operator mended for the newer
			// one, and ran their hooks, while the node went on reporting the
			// newer one's failure.
			return
		}
		if fresh {
			// The mesh sends it as this node's current declaration: the root is
			// marked with it, whatever its mark named (markCurrent).
			a.markCurrent()
		}
		if held, ask := a.rootNewer(); held {
			// The root holds another declaration and the mesh has not said this
			// one is current (an older copy, a replay; or the mark could not be
			// written): put back, it wrote the state's files over the root's, as
			// the mark keeps the file check from doing.
			a.syncWanted = a.syncWanted || ask
			return
		}
		if _, err := a.putBack(ctx, v.Version, files); err != nil {
			a.failPutBack(err, v.Version)
		}
		return
	}
	// A path the apply may create is on record before it is created: saved only
	// after, a save that failed (a full disk) or a crash in between left files no
	// record named, which no later declaration removed. Declarations that change
	// contents, not paths, cost no write more.
	// So are the paths whose hooks the apply may owe, until they have run: a
	// stop or a crash before then would lose them (the version is saved first).
	prevManaged, prevPending := a.applied.Managed, a.applied.HooksPending
	managed, grew := withPaths(a.applied.Managed, files)
	pending, owed := a.hooksOwed(files)
	if grew || owed {
		a.applied.Managed, a.applied.HooksPending = managed, pending
		if err := a.store.Save(a.applied); err != nil {
			a.applied.Managed, a.applied.HooksPending = prevManaged, prevPending
			a.log.Error("could not record the files about to be written; nothing applied", "version", v.Version, "err", err)
			a.failCode(wire.StatusStateNotSaved, err, v.Version)
			at := a.retry.schedule(raw, v.Version, a.o.Now(), a.o.RetryMin, a.o.RetryMax)
			a.applied.NextAttempt = at
			return
		}
	}
	applyStart := time.Now()
	res, err := a.applier.Apply(ctx, files, a.applied.Managed)
	if err != nil && unchanged(err) {
		// Nothing was written, or all of it undone: the paths put on record for
		// this apply are not the agent's (one may be another's directory, which a
		// later declaration would try to remove as no longer declared).
		a.applied.Managed = prevManaged
	}
	if err != nil && !unchanged(err) {
		// Some of the files stay changed (rolling back failed too): their hooks
		// are owed whatever a later attempt finds. Left to that attempt, it saw
		// those files already as declared, reported them unchanged, and the hook
		// of what this attempt wrote never ran, with the node converged.
		a.applied.HooksPending = pending
		a.applyOwed = union(a.applyOwed, pending)
	}
	if err != nil && ctx.Err() != nil {
		// The agent is stopping (systemctl stop): the apply was undone, and the
		// next start syncs and applies the declaration. Not a failure of the host.
		if unchanged(err) {
			a.applied.HooksPending = prevPending
		}
		a.save()
		a.log.Info("the declaration was being applied as the agent stopped; undone, it is applied at the next start", "version", v.Version, "err", err)
		return
	}
	if err != nil {
		if unchanged(err) {
			a.applied.HooksPending = prevPending // undone: nothing changed
		}
		a.failCode(wire.StatusApplyFailed, err, v.Version)
		at := a.retry.schedule(raw, v.Version, a.o.Now(), a.o.RetryMin, a.o.RetryMax)
		a.applied.NextAttempt = at
		a.save()
		a.log.Warn("the declaration will be tried again", "version", v.Version, "at", at.Format(time.RFC3339))
		return
	}
	a.retry.clear()
	a.applied.NextAttempt = time.Time{}
	a.keep(raw, files, v.ExpiresAt)
	took := time.Since(applyStart)
	// The root holds the declaration: a put back that failed is over.
	a.stats.set(func(s *stats) { s.applied++; s.lastApply = took; s.putBackFailed = "" })
	a.applied.HaveApplied = true
	a.applied.Version = v.Version
	a.applied.BodyDigest = hex.EncodeToString(v.BodyDigest[:])
	a.applied.IssuedAt, a.applied.ExpiresAt = v.IssuedAt, v.ExpiresAt
	a.applied.Managed = res.Managed
	a.applied.LastError, a.applied.LastErrorCode, a.applied.LastErrorVersion = "", "", 0
	changed := append(slices.Clone(res.Written), res.Removed...)
	if len(a.applyOwed) > 0 {
		changed = union(slices.Sorted(slices.Values(changed)), a.applyOwed)
		a.applyOwed = nil
	}
	a.applied.HooksPending = union(prevPending, a.o.Hooks.Matching(changed))
	// The root says what it holds before the state does (rootmark.go): cut off
	// in between, the state names the older version, and the mark keeps the file
	// check from putting its files back.
	a.markApplied()
	a.save()
	a.log.Info("declaration applied", "version", v.Version, "written", len(res.Written), "removed", len(res.Removed), "unchanged", len(res.Unchanged))
	a.logLeft(v.Version, res.Left)
	a.logOwnersIgnored(v.Version, files)
	// A declaration, even one that changes nothing (the same body declared again),
	// runs again the hooks that failed: it is how the control plane retries them.
	if (len(changed) > 0 || len(a.hookFailed) > 0) && len(a.o.Hooks.Hooks) > 0 {
		a.queueHooks(hookRun{version: v.Version, changed: changed})
	}
}

// retryRefused handles the declaration that failed to apply, refused as it is
// verified again for an attempt (err). Before, only its expiry was handled: any
// other refusal left the attempt that fired as the last, its retry pending (which
// keeps the file check off) and its next attempt announced in the past, while the
// mesh, told the node retries by itself, sent nothing; a host fixed by hand stayed
// so until the declaration was re-signed, up to 12 hours later.
//
//   - Not valid yet: this machine's clock was set back by more than the tolerance
//     (an hour). Tried again with the backoff, as a failed apply is: the clock may
//     be right at the next attempt.
//   - Anything else cannot become valid by waiting: expired (the mesh out of reach
//     all the while, which otherwise re-signs it, or this clock ahead), older than
//     the keyring (a rotation: the mesh signs it under the keyring of the moment
//     for a sync, not for a rotation), its signer retired. No further attempt is
//     made or announced, and the mesh is asked for its copy at once (once it is
//     reached); the copy it sends is verified and applied as any.
func (a *Agent) retryRefused(err error) {
	if errors.Is(err, declarations.ErrNotYetValid) {
		at := a.retry.schedule(a.retry.raw, a.retry.version, a.o.Now(), a.o.RetryMin, a.o.RetryMax)
		a.applied.NextAttempt = at
		a.save()
		a.log.Warn("the declaration that failed to apply is not valid yet by this machine's clock (set back?): tried again later", "version", a.retry.version, "at", at.Format(time.RFC3339), "err", err)
		return
	}
	a.log.Warn("the declaration that failed to apply is refused now: no further attempt; the mesh is asked for its current copy", "version", a.retry.version, "code", declarations.Code(err), "err", err)
	a.retry.clear()
	a.applied.NextAttempt = time.Time{}
	a.save()
	a.syncWanted = true
}

// expect is what a declaration for this node must say now, the applied one known.
func (a *Agent) expect() declarations.Expect {
	digest, _ := hex.DecodeString(a.applied.BodyDigest)
	var appliedDigest [32]byte
	copy(appliedDigest[:], digest)
	return declarations.Expect{
		Mesh: a.id.Mesh, Node: a.id.Node, NodeKey: a.id.PublicKey, KeyringEpoch: a.keyring.Epoch,
		HaveApplied: a.applied.HaveApplied, AppliedVersion: a.applied.Version, AppliedBodyDigest: appliedDigest,
		Now: a.o.Now(), Skew: a.o.Skew,
	}
}

// unchanged reports whether a failed apply left the managed root as it was: refused
// before writing anything, or every change rolled back.
func unchanged(err error) bool {
	var ae *apply.ApplyError
	return !errors.As(err, &ae) || ae.RolledBack
}

// hooksOwed returns the paths whose hooks are owed should the apply of files
// change them all: those owed already, and each declared or managed path some hook
// runs for; and whether that adds any.
func (a *Agent) hooksOwed(files []apply.File) ([]string, bool) {
	if len(a.o.Hooks.Hooks) == 0 {
		return a.applied.HooksPending, false
	}
	paths := slices.Clone(a.applied.Managed)
	for _, f := range files {
		paths = append(paths, f.Path)
	}
	owed := union(a.applied.HooksPending, a.o.Hooks.Matching(paths))
	return owed, len(owed) > len(a.applied.HooksPending)
}

// union returns the sorted paths of a and b, each once.
func union(a, b []string) []string {
	if len(b) == 0 {
		return a
	}
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}

// filesOf is what the applier writes for the verified declaration v.
func filesOf(v declarations.Verified) ([]apply.File, error) {
	files := make([]apply.File, 0, len(v.Body.Files))
	for _, f := range v.Body.Files {
		data, err := f.Data()
		if err != nil {
			return nil, err
		}
		mode, err := f.FileMode()
		if err != nil {
			return nil, err
		}
		files = append(files, apply.File{Path: f.Path, Data: data, Mode: mode, Owner: f.Owner, Group: f.Group})
	}
	return files, nil
}

// managedMissing reports whether a file the agent manages is missing from the root:
// a root restored from a backup older than the state directory, a file removed by
// hand while the agent was stopped, or one an apply cut off had recorded as managed
// and not written yet (said apart: appliedPaths). The mesh does not send a node the declaration it
// holds applied (a fleet restarting would be sent every one), so the file stayed
// missing until the next re-signed copy, up to 12 hours later. Only absence is
// checked, one lstat a file, as the agent starts; a file changed by hand is put back
// at that re-signed copy or the next declaration.
func (a *Agent) managedMissing() bool {
	if !a.applied.HaveApplied || a.o.Root == "" {
		return false
	}
	var missing []string
	for _, p := range a.applied.Managed {
		if _, err := os.Lstat(filepath.Join(a.o.Root, filepath.FromSlash(p))); errors.Is(err, fs.ErrNotExist) {
			missing = append(missing, p)
		}
	}
	if len(missing) == 0 {
		return false
	}
	if _, err := os.Lstat(a.o.Root); errors.Is(err, fs.ErrNotExist) {
		// The root itself: blaming a backup or a person hid what it most often
		// is, a mistyped --root, which the first apply makes (a walkthrough).
		a.log.Warn("the managed root does not exist: a new or mistyped --root, or one removed while the agent was stopped; the agent makes it (never the directories above it) and asks for the applied declaration again to put its files there. If --root is mistyped, stop the agent and run it with the right one",
			"root", a.o.Root, "count", len(missing))
		return true
	}
	// A path the applied declaration does not name was recorded as managed by an
	// apply of a newer one, before its first write (handleDeclaration), and that
	// apply was cut off: blaming a backup or a person sent the operator looking for
	// one that never was.
	named := a.appliedPaths()
	var cutOff, gone []string
	for _, p := range missing {
		if named != nil && !named[p] {
			cutOff = append(cutOff, p)
		} else {
			gone = append(gone, p)
		}
	}
	if len(cutOff) > 0 {
		a.log.Warn("managed files are missing from the root that the applied declaration does not name: an apply was cut off (the agent stopped or crashed) before writing them; the mesh is asked for its declaration",
			"count", len(cutOff), "first", cutOff[0])
	}
	if len(gone) > 0 {
		a.log.Warn("managed files are missing from the root (restored from an older backup, or removed by hand while the agent was stopped): the applied declaration is asked for again to put them back",
			"count", len(gone), "first", gone[0])
	}
	return true
}

// appliedPaths returns the paths of the applied declaration's files, as the copy of
// it the agent keeps has them (verified: verifyCopy); nil when it keeps no usable
// copy, and cannot tell.
func (a *Agent) appliedPaths() map[string]bool {
	raw := a.loadKept()
	if raw == nil {
		return nil
	}
	_, files, err := a.verifyCopy(raw)
	if err != nil {
		return nil
	}
	named := make(map[string]bool, len(files))
	for _, f := range files {
		named[f.Path] = true
	}
	return named
}

// putBack applies the declaration already applied again: the applier writes only
// what differs from it, so a managed file changed or removed by hand since is put
// back (and its hooks run), and nothing else is touched. A failure is reported for
// the version and left for the next refresh or declaration.
func (a *Agent) putBack(ctx context.Context, version uint64, files []apply.File) ([]string, error) {
	// The hooks a put back may owe are on record before it writes, as for a
	// declaration (handleDeclaration): saved only after, a kill in between left a
	// file put back whose hook never ran. Set to what changed once it has.
	prevPending := a.applied.HooksPending
	if pending, owed := a.hooksOwed(files); owed {
		a.applied.HooksPending = pending
		a.save()
	}
	res, err := a.applier.Apply(ctx, files, a.applied.Managed)
	if ctx.Err() == nil {
		// For meshhost status: "none changed" is not the news while a change
		// cannot be put back.
		failure := ""
		if err != nil {
			failure = err.Error()
		}
		a.stats.set(func(s *stats) { s.putBackFailed = failure })
	}
	if err != nil {
		if !unchanged(err) {
			// Some files stay written (rolling back failed too): their hooks are
			// owed whatever the next attempt finds, as for a declaration's apply.
			if owed, more := a.hooksOwed(files); more {
				a.applied.HooksPending = owed
				a.save()
			}
			a.applyOwed = union(a.applyOwed, a.applied.HooksPending)
		} else if !slices.Equal(a.applied.HooksPending, prevPending) {
			a.applied.HooksPending = prevPending // undone: nothing changed
			a.save()
		}
		return nil, err
	}
	a.logLeft(version, res.Left)
	if a.applied.LastErrorCode == wire.StatusApplyFailed && a.applied.LastErrorVersion == version {
		// The root holds the declaration again (put back now, or mended by hand
		// since the last attempt failed): the failure is over, and a hook's that
		// it took the place of is the node's again.
		a.applied.LastError, a.applied.LastErrorCode, a.applied.LastErrorVersion = "", "", 0
		if len(a.hookFailed) > 0 {
			a.applied.LastErrorCode, a.applied.LastError, a.applied.LastErrorVersion = wire.StatusHookFailed, a.hookErr, a.hookErrVersion
		}
		a.save()
	}
	changed := append(slices.Clone(res.Written), res.Removed...)
	if len(changed) > 0 {
		a.log.Warn("managed files changed on this host since they were applied; put back as declared", "version", version, "files", changed)
		now := a.o.Now()
		a.stats.set(func(s *stats) {
			s.putBack += uint64(len(changed))
			s.lastPutBackAt, s.lastPutBackCount = now, len(changed)
			s.lastPutBack = slices.Clone(changed[:min(len(changed), maxShownPutBack)])
		})
	}
	hookPaths := changed
	if len(a.applyOwed) > 0 {
		hookPaths = union(slices.Sorted(slices.Values(changed)), a.applyOwed)
		a.applyOwed = nil
	}
	if owed := union(prevPending, a.o.Hooks.Matching(hookPaths)); !slices.Equal(owed, a.applied.HooksPending) {
		a.applied.HooksPending = owed
		a.save()
	}
	if len(hookPaths) > 0 && len(a.o.Hooks.Hooks) > 0 {
		// Nobody acted: the hooks that failed before are not taken along, or a file
		// something keeps changing ran a failed restart again at every check.
		a.queueHooks(hookRun{version: version, changed: hookPaths, notRetry: true})
	}
	return changed, nil
}

// logLeft says which paths no longer declared an apply left in place, and why
// (apply.Result.Left): something other than the file the agent wrote stands there
// now (a directory, a link), which the agent neither removes nor manages any more.
func (a *Agent) logLeft(version uint64, left []apply.LeftPath) {
	const maxShown = 10
	if len(left) == 0 {
		return
	}
	shown := make([]string, 0, min(len(left), maxShown))
	for _, l := range left[:min(len(left), maxShown)] {
		shown = append(shown, l.Path+": "+l.Reason)
	}
	a.log.Warn("paths no longer declared were left in place, not removed: what stands there now is not the file the agent wrote", "version", version, "count", len(left), "left", shown)
}

// handleMembership accepts a newer signed list of the mesh's brokers, persisted for
// the next start and given to the connection at once: control nodes that joined
// since are tried, removed ones no longer are.
func (a *Agent) handleMembership(env *declarations.Parsed) {
	m, err := env.VerifyMembership(a.keys, a.id.Mesh, a.applied.MembershipVersion, a.applied.Brokers)
	if err != nil {
		var ve *declarations.VersionError
		if a.crossedSync(err, "membership", func(q *syncAsked) bool { return errors.As(err, &ve) && ve.Got > q.req.MembershipVersion }) {
			return
		}
		a.fail(err, 0)
		return
	}
	if m.Version == a.applied.MembershipVersion {
		a.log.Debug("the mesh's brokers verified: as held already", "version", m.Version)
		return
	}
	a.applied.Brokers, a.applied.MembershipVersion = m.Brokers, m.Version
	a.save()
	a.log.Info("the mesh's brokers", "brokers", m.Brokers, "version", m.Version)
	a.followBrokers()
}

// followBrokers makes the brokers the connection reconnects to those the agent
// dials now (brokers: the list just accepted, and --broker's). nats.go keeps the
// list the connection was made with (it adds none a broker's INFO lists: the
// link's options ignore them): a host whose brokers at start had all been removed
// since was left dialling those alone once its broker went, until the agent was
// restarted, though it held the new list.
func (a *Agent) followBrokers() {
	if a.conn == nil {
		return // the first connection is made with the list of now
	}
	if err := a.conn.SetServerPool(link.URLList(a.brokers())); err != nil {
		a.log.Warn("the connection keeps its brokers; the new list is used from the next start", "err", err)
	}
}

func (a *Agent) handleKeyring(raw []byte, env *declarations.Parsed) {
	kr, err := env.VerifyKeyring(a.keyring, a.id.Mesh)
	if err != nil {
		var ve *declarations.VersionError
		if a.crossedSync(err, "keyring", func(q *syncAsked) bool { return errors.As(err, &ve) && ve.Got > q.req.KeyringEpoch }) {
			return
		}
		a.fail(err, 0)
		return
	}
	if kr.Epoch == a.keyring.Epoch {
		a.log.Debug("keyring verified: as held already", "epoch", kr.Epoch)
		return
	}
	keys, err := kr.PublicKeys()
	if err != nil {
		a.fail(err, 0)
		return
	}
	a.keyring, a.keys = kr, keys
	a.applied.Keyring, a.applied.KeyringEpoch = raw, kr.Epoch
	a.save()
	a.log.Info("keyring accepted", "epoch", kr.Epoch, "keys", len(kr.Keys))
}

// crossedSync reports whether err refuses an envelope of the sync in hand
// (answering) that newer says is what the node held as it asked (the same body) or
// newer: the
// mesh read its state for the answer, then pushed what changed next, which came
// first (a rotation's keyring, a declaration). Nothing is applied, and it is no
// refusal to report: reported, a converged node showed rolled_back or
// old_keyring, which say that old envelopes were replayed to it or that the
// control plane was restored from an older copy (a docs walkthrough). An answer
// older than what the node held as it asked (a restored control plane) is
// reported as before. Only what has the current sync's tag counts; the broker,
// which sees the tag, can as well drop the report.
func (a *Agent) crossedSync(err error, what string, newer func(*syncAsked) bool) bool {
	if a.answering == nil || !newer(a.answering) {
		return false
	}
	a.log.Debug("an envelope of the sync crossed a newer one pushed meanwhile: nothing to apply", "envelope", what, "err", err)
	return true
}

// fail records why an envelope was refused; the applied state is untouched. A refusal does not hide a failure of
// this host (an apply, a hook, a save, which an operator must act on) behind what
// anyone able to put bytes on the node's subject can send (junk, an old declaration
// replayed), and costs no write to disk: it is reported, logged and counted.
func (a *Agent) fail(err error, version uint64) {
	code := declarations.Code(err)
	if ok, held := a.refusals.allow(code, a.o.Now()); ok && held > 0 {
		a.log.Warn("envelope not applied", "code", code, "version", version, "err", err, "suppressed", held)
	} else if ok {
		a.log.Warn("envelope not applied", "code", code, "version", version, "err", err)
	}
	a.stats.set(func(s *stats) {
		if s.refused == nil {
			s.refused = map[string]uint64{}
		}
		s.refused[code]++
	})
	switch a.applied.LastErrorCode {
	case wire.StatusApplyFailed, wire.StatusHookFailed, wire.StatusStateNotSaved:
		return
	}
	a.applied.LastErrorCode, a.applied.LastError, a.applied.LastErrorVersion = code, err.Error(), version
	a.publishState()
}

func (a *Agent) failCode(code string, err error, version uint64) {
	msg := "envelope not applied"
	if code == wire.StatusHookFailed {
		// The files were written and the version recorded; only a command the
		// host's own hooks file names failed. It stays owed, and nothing retries
		// it by itself: a failing restart is not repeated behind the operator's back.
		msg = "a hook failed after the declaration was applied; fix what it runs, then run `meshhost hooks retry` on this host (or restart the agent, or declare again): the node is failing until it succeeds"
	}
	if errors.Is(err, apply.ErrRootGone) {
		msg = rootGoneMessage
	}
	a.log.Warn(msg, "code", code, "version", version, "err", err)
	a.failed(code, err, version)
}

// failPutBack records that the managed files the applied declaration holds could
// not be put back as declared after they changed on this host: no envelope was
// refused, the node is failing (apply_failed) until a check or a declaration
// succeeds.
func (a *Agent) failPutBack(err error, version uint64) {
	if errors.Is(err, apply.ErrRootGone) {
		a.log.Error(rootGoneMessage, "code", wire.StatusApplyFailed, "version", version, "root", a.o.Root, "err", err)
	} else {
		a.log.Warn("managed files changed on this host could not be put back as declared; the file check tries again at each run, and the node is failing until it or a declaration succeeds", "code", wire.StatusApplyFailed, "version", version, "err", err)
	}
	a.failed(wire.StatusApplyFailed, err, version)
}

// rootGoneMessage is what the log says when the managed root is not the directory
// the agent worked in (apply.ErrRootGone): not files changed by hand, which a put
// back mends, but a root to mount or put back, which a person must do.
const rootGoneMessage = "the managed root is gone or is another directory (a file system unmounted, a directory removed or swapped): " +
	"nothing is written there and no hook runs; mount it back or put it back, and the file check puts the files back as declared, " +
	"or restart the agent to take the new directory; the node is failing (apply_failed) until then"

// failed makes code the node's error, counts it and saves it.
func (a *Agent) failed(code string, err error, version uint64) {
	a.stats.set(func(s *stats) {
		if s.refused == nil {
			s.refused = map[string]uint64{}
		}
		s.refused[code]++
	})
	a.applied.LastErrorCode, a.applied.LastError, a.applied.LastErrorVersion = code, err.Error(), version
	if code == wire.StatusHookFailed {
		a.hookErr, a.hookErrVersion = err.Error(), version
	}
	a.save()
}

func (a *Agent) save() {
	a.publishState()
	if err := a.store.Save(a.applied); err != nil {
		// The change is made and known in memory, and every path it wrote was on
		// record before (withPaths): a restart syncs and applies the current
		// declaration over it. Reported, and tried again at each heartbeat.
		a.logUnsaved(err)
		a.unsaved = true
		kept := ""
		if c := a.applied.LastErrorCode; c == wire.StatusApplyFailed || c == wire.StatusHookFailed {
			kept = c + ": " + a.applied.LastError
		}
		next := a.applied.NextAttempt
		a.stats.set(func(s *stats) { s.unsaved, s.unsavedFailure, s.unsavedNextAttempt = err.Error(), kept, next })
		if kept != "" {
			// The failure being recorded stays the report's, with its version:
			// the disk that refuses the save (read-only after an error) is often
			// what failed the apply, and state_not_saved for the version applied
			// before hid it (`declare --wait` waited out its timeout on the new
			// one). The save's failure is in the log and in `meshhost status`
			// (unsaved), and tried again at each heartbeat.
			return
		}
		if a.applied.LastErrorCode != wire.StatusStateNotSaved {
			a.applied.LastErrorVersion = a.applied.Version
		}
		a.applied.LastErrorCode, a.applied.LastError = wire.StatusStateNotSaved, err.Error()
		return
	}
	if a.unsaved {
		a.stats.set(func(s *stats) { s.unsaved, s.unsavedFailure, s.unsavedNextAttempt = "", "", time.Time{} })
	}
	a.unsaved, a.stateGone = false, ""
}

// logUnsaved says why a save failed. A state directory removed or replaced while
// the agent runs (state.ErrDirGone) is said as such, once: the save is refused at
// each heartbeat until the directory is back, and what the person must do does not
// change. The agent does not write its identity back from memory: a directory
// removed on purpose (to enrol the machine again) would come back, and enrol refuse
// it as enrolled; one unmounted would be made under its mount point; and the lock
// and the socket it held are gone, another meshhost free to take the path.
func (a *Agent) logUnsaved(err error) {
	if !errors.Is(err, state.ErrDirGone) {
		a.log.Error("could not persist the applied state", "err", err)
		return
	}
	if err.Error() == a.stateGone {
		return
	}
	a.stateGone = err.Error()
	a.log.Error("the state directory was removed or replaced while the agent ran: nothing is saved, and the directory is not made again; "+
		"unless the directory this agent started with is put back, identity.json, this node's key, is not where the next start reads it, and this agent will not start again. "+
		"Put the directory back (or restore it) and restart the agent, or revoke this node and enrol the machine again (err says which happened)",
		"dir", a.o.StateDir, "code", wire.StatusStateNotSaved, "err", err)
}

// noticeStateGone says at a heartbeat, without waiting for a change to save, that
// the state directory was removed or replaced (one stat): the save it then tries is
// refused, logged and reported as state_not_saved, and tried again at each
// heartbeat (saveAgain), so that the mesh hears within one that this node will not
// come back from a restart, not at its next declaration.
func (a *Agent) noticeStateGone() {
	if a.unsaved || a.store.Gone() == nil {
		return
	}
	a.save()
}

// saveAgain tries once more to persist a state whose last save failed, and clears
// the error it reported once it succeeds.
func (a *Agent) saveAgain() {
	if !a.unsaved {
		return
	}
	if a.applied.LastErrorCode == wire.StatusStateNotSaved {
		a.applied.LastErrorCode, a.applied.LastError, a.applied.LastErrorVersion = "", "", 0
		if len(a.hookFailed) > 0 {
			// The save's error took the place of a hook's failure, which stands:
			// cleared, the node would look converged with its hook failed.
			a.applied.LastErrorCode, a.applied.LastError, a.applied.LastErrorVersion = wire.StatusHookFailed, a.hookErr, a.hookErrVersion
		}
	}
	a.save()
	if !a.unsaved {
		a.log.Info("the applied state is saved again", "version", a.applied.Version)
	}
}

// withPaths returns managed (sorted, as the applier's results and this return it)
// with the paths of files it lacks added, and whether it lacked any. A
// declaration's paths are unique.
func withPaths(managed []string, files []apply.File) ([]string, bool) {
	if !slices.IsSorted(managed) {
		managed = slices.Sorted(slices.Values(managed))
	}
	var added []string
	for _, f := range files {
		if _, found := slices.BinarySearch(managed, f.Path); !found {
			added = append(added, f.Path)
		}
	}
	if len(added) == 0 {
		return managed, false
	}
	out := append(slices.Clone(managed), added...)
	slices.Sort(out)
	return out, true
}

// noteStale says in the log when the applied declaration expires without a fresh
// one (the mesh out of reach, or not refreshing it), and when a fresh one came; it
// reports whether the declaration has just turned stale or fresh.
func (a *Agent) noteStale() (turned bool) {
	stale := a.Stale()
	if stale == a.stale {
		return false
	}
	a.stale = stale
	if stale {
		a.log.Warn("the applied declaration expired without a fresh one: this node is stale; its files stay as they are until the mesh sends one",
			"version", a.applied.Version, "expired_at", a.applied.ExpiresAt.Format(time.RFC3339), "connected", a.online())
		return true
	}
	a.log.Info("the applied declaration is fresh again", "version", a.applied.Version, "expires_at", a.applied.ExpiresAt.Format(time.RFC3339))
	return true
}

// refusedForValidity reports whether the last error this node reports is a
// declaration refused for its validity window (not_yet_valid, expired): a clock,
// this node's or the one that stamped it, was wrong.
func (a *Agent) refusedForValidity() bool {
	switch a.applied.LastErrorCode {
	case declarations.Code(declarations.ErrNotYetValid), declarations.Code(declarations.ErrExpired):
		return true
	}
	return false
}

// clockMayHelp reports whether, this node's clock having moved across the applied
// declaration's expiry, the mesh's copy may now verify where one did not: the
// node is stale, or reports a declaration refused for its validity window, or
// asks for a copy of the applied one (refused so while another failure is
// reported, or dropped by the file check), or a newer declaration failed to apply
// and waits for the mesh (its attempts ended, refused as expired while the clock
// was ahead, or a restart: awaitsNewer).
func (a *Agent) clockMayHelp() bool {
	return a.stale || a.refusedForValidity() || a.askApplied || a.awaitsNewer()
}

// awaitsNewer reports whether a declaration newer than the applied one failed to
// apply and no attempt of it is pending: only the copy the mesh sends brings it
// (the mesh does not send it by itself to a node that reports it failed).
func (a *Agent) awaitsNewer() bool {
	return a.retry.raw == nil && a.applied.LastErrorCode == wire.StatusApplyFailed && a.applied.LastErrorVersion > a.applied.Version
}

// Stale reports whether the applied declaration has expired without a fresh one.
func (a *Agent) Stale() bool {
	return a.applied.HaveApplied && a.o.Now().After(a.applied.ExpiresAt)
}

func (a *Agent) report(nc *nats.Conn) {
	if nc == nil || !nc.IsConnected() {
		return
	}
	// The reply subject asks the mesh to answer when it has something to tell this
	// node: that another machine holds its key. A control plane that does not know
	// it never answers.
	if err := nc.PublishMsg(&nats.Msg{Subject: a.id.Subjects.Status, Reply: a.replyTo, Data: a.statusReport()}); err != nil {
		a.log.Warn("status not sent", "err", err)
		return
	}
	a.log.Debug("status sent", "applied_version", a.applied.Version, "error", a.applied.LastErrorCode)
}

// statusReport is the status report as sent. Its error message is clipped (see
// clipMessage): hooks' output and error texts have no bound of their own, and the
// report must stay within wire.MaxStatusSize whatever they hold.
func (a *Agent) statusReport() []byte {
	st := wire.Status{
		V: wire.ProtocolVersion, Node: a.id.Node,
		HaveApplied: a.applied.HaveApplied, AppliedVersion: a.applied.Version,
		KeyringEpoch: a.keyring.Epoch, Stale: a.Stale(), Agent: a.o.Agent, HooksRunning: a.hooksRunning(),
		// This agent's verifier takes declarations signed in a batch (decision 0034).
		BatchProofs: true,
		// The control plane counts the node offline after three of them without
		// a report (or after its --offline-after if longer).
		HeartbeatSeconds: uint32((a.o.Heartbeat + time.Second - 1) / time.Second),
	}
	if a.applied.LastErrorCode != "" {
		st.Error = &wire.StatusError{Code: a.applied.LastErrorCode, Message: clipMessage(a.applied.LastError), Version: a.applied.LastErrorVersion,
			RetryAt: a.applied.NextAttempt}
	}
	// Operators see on the control plane that a host's files were changed behind
	// the mesh's back, and put back, without logging in to each host.
	a.stats.set(func(s *stats) { st.PutBack, st.LastPutBackAt = s.putBack, s.lastPutBackAt })
	data, _ := json.Marshal(st)
	return data
}

// clipMessage cuts an error's text to wire.MaxStatusMessage bytes, the most the
// control plane keeps, on a UTF-8 boundary, and says it was cut and where the rest is:
// the agent's log and its applied state (`meshhost status`) keep the whole text.
//
// The text is first made valid UTF-8, as the control plane will decode it anyway:
// JSON carries a byte that is not UTF-8 (a hook can print any) as U+FFFD, three bytes,
// and a text clipped before that would reach the control plane longer than it keeps.
// Encoded, the result is at most six times as long (JSON escapes a control or HTML
// character in six bytes), so a report stays well under wire.MaxStatusSize.
func clipMessage(msg string) string {
	whole := len(msg)
	msg = strings.ToValidUTF8(msg, string(utf8.RuneError))
	if len(msg) <= wire.MaxStatusMessage {
		return msg
	}
	marker := fmt.Sprintf(" … [cut: %d bytes in all; the whole text is in the host's log and in meshhost status]", whole)
	return runePrefix(msg, wire.MaxStatusMessage-len(marker)) + marker
}

// ErrStateInRoot: the state directory is the managed root or inside it, so a
// declared file could replace the node's identity or what it applied.
var ErrStateInRoot = errors.New("the state directory must not be inside the managed root")

// CheckApart refuses, as New does, a state directory that is the managed root or
// inside it (ErrStateInRoot). meshhost run asks first, so that this mistake in its
// command line is said as such, not as a lock another agent holds or an identity
// missing from a directory that is not the state directory meant.
func CheckApart(stateDir, root string) error { return outside(stateDir, root) }

// RootInState reports whether the managed root is inside the state directory (links
// resolved as far as the paths exist) while group and others may not enter the state
// directory (as enrol makes it, 0700), and its mode: safe, declarations stay in it,
// but no other user reaches a declared file, whatever owner and mode it is declared
// with.
func RootInState(stateDir, root string) (fs.FileMode, bool) {
	s, err := statedir.Resolved(stateDir)
	if err != nil {
		return 0, false
	}
	r, err := statedir.Resolved(root)
	if err != nil || !statedir.Within(r, s) {
		return 0, false
	}
	fi, err := os.Stat(s)
	if err != nil || fi.Mode().Perm()&0o011 != 0 {
		return 0, false
	}
	return fi.Mode().Perm(), true
}

// outside refuses a state directory that is the managed root or inside it (links
// resolved as far as the paths exist, directories judged by identity too): a declaration names any path in the root,
// and could replace identity.json (the keys the node trusts) or applied.state.
// A managed root inside the state directory is fine: declarations stay in it.
func outside(stateDir, root string) error {
	s, err := statedir.Resolved(stateDir)
	if err != nil {
		return err
	}
	r, err := statedir.Resolved(root)
	if err != nil {
		return err
	}
	if statedir.Within(s, r) {
		return fmt.Errorf("%w: --state %s is in --root %s, where a declaration could replace the node's keys; choose places apart", ErrStateInRoot, stateDir, root)
	}
	return nil
}

// brokerOf is the broker address a pin refusal names (link.BrokerError), or "".
func brokerOf(err error) string {
	var be *link.BrokerError
	if errors.As(err, &be) {
		return be.Broker
	}
	return ""
}

// logOwnersIgnored says, once an apply, that the owners and groups the declaration
// gives were not set: an agent that is not root writes its files as its own user
// (documented, and said nowhere else: a walkthrough found a file declared
// "owner": "daemon" its agent's user's without a word).
func (a *Agent) logOwnersIgnored(version uint64, files []apply.File) {
	fa, ok := a.applier.(apply.FileApplier)
	if !ok || fa.Chown {
		return
	}
	n, first := 0, ""
	for _, f := range files {
		if f.Owner != "" || f.Group != "" {
			if n == 0 {
				first = f.Path
			}
			n++
		}
	}
	if n > 0 {
		a.log.Info("owner and group declared were not set: the agent does not run as root, and writes its files as its own user", "version", version, "files", n, "first", first, "uid", a.euid)
	}
}
