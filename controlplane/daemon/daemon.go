// Package daemon is the control-plane daemon (`meshctl serve`): the Raft member with
// the replicated state, the embedded broker whose clients it authenticates, and the
// handlers that admit nodes, hand out signed declarations, record status and serve
// operators.
//
// Only the Raft leader serves the API: it subscribes its handlers when it becomes
// leader and drops them when it stops being leader, so every write is proposed where
// it can be committed and every answer reflects committed state. Every control node
// runs a broker and enforces revocations on it.
package daemon

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/oklog/run"
	"github.com/prometheus/client_golang/prometheus"

	"mesh/broker"
	"mesh/controlplane/api"
	"mesh/controlplane/authn"
	"mesh/controlplane/backup"
	"mesh/controlplane/datadir"
	"mesh/controlplane/operator"
	"mesh/controlplane/pki"
	"mesh/controlplane/presence"
	"mesh/controlplane/replication"
	"mesh/controlplane/state"
	"mesh/declarations"
)

// Options configures a daemon.
type Options struct {
	Dir    datadir.Dir
	Logger *slog.Logger
	// Version is the version of the meshctl serving (`meshctl version`), which
	// `meshctl control status` shows for each control node; "" says none.
	Version string
	// Revision is the commit the meshctl serving was built from ("" when its build
	// recorded none): mesh_build_info says it with Version.
	Revision string
	// Timeouts tunes Raft; zero means replication.DefaultTimeouts.
	Timeouts replication.Timeouts
	// OfflineAfter is how long after its last report a node counts as offline: three
	// missed heartbeats by default.
	OfflineAfter time.Duration
	// ReconcileInterval is how often the leader re-sends declarations that nodes
	// have not applied yet.
	ReconcileInterval time.Duration
	// StatusFlushInterval batches status changes into one log entry.
	StatusFlushInterval time.Duration
	// ReadyTimeout bounds the wait for this node's state to be current at start.
	ReadyTimeout time.Duration
	// Now is the wall clock (tests skew it); nil means time.Now. It stamps the
	// commands this node proposes, and so token expiry and declaration validity.
	Now func() time.Time
	// Budgets bound what one node may send; zero fields take DefaultBudgets.
	Budgets Budgets
	// MetricsListen, when set, is where /metrics, /healthz and /readyz are served
	// (ip:port).
	MetricsListen string
	// Profiling adds Go's profiler (/debug/pprof/) to the MetricsListen endpoint. It
	// shows the program's internals to whoever reaches the address: off by default.
	Profiling bool
	// RequireBoundLogins refuses logins not bound to their TLS session: agents and
	// meshctl older than decision 0018, and the stock nats CLI
	// (authn.Config.RequireBound). Off by default, so that those keep working.
	RequireBoundLogins bool
	// RequireSignedChanges refuses operator changes not signed by their
	// credentials' key (api.OperatorSigHeader), or signed more than
	// api.MaxOperatorSigSkew off this node's clock: those of the stock nats CLI
	// and of meshctl older than the signature. Off by default, so that those keep
	// working. A change signed by credentials no longer valid is refused either
	// way (decision 0042).
	RequireSignedChanges bool
	// MaxHosts, when positive, caps the host connections this node's broker holds
	// below what its open-file limit allows (broker.ProcessCapacity).
	MaxHosts int
	// SharedKeyGrace is how long a node's key may be held by more than one
	// connection at once before the node counts as held by two machines, failing
	// api.KeyShared; api.SharedKeyGrace when zero.
	SharedKeyGrace time.Duration
	// Backup, when set, has this node back itself up while it serves.
	Backup *BackupOptions
	// TermNotRecorded is replication.Config.TermNotRecorded: the node cannot go on,
	// and the caller ends the process saying why. nil leaves it to Raft's panic.
	TermNotRecorded func(error)

	// wrapAuth, when set, wraps the broker's authenticator: the package's tests
	// use it to admit an observer no real client can be.
	wrapAuth func(broker.Authenticator) broker.Authenticator
	// expiryCheckEvery is how often a running node looks at its certificates'
	// expiry again (watchExpiry): once a day unless a test asks for sooner.
	expiryCheckEvery time.Duration
	// operatorSweepEvery is how often a running node closes the connections of
	// operator credentials revoked or removed that its broker still holds.
	operatorSweepEvery time.Duration
}

func (o *Options) defaults() {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.OfflineAfter == 0 {
		o.OfflineAfter = 45 * time.Second
	}
	if o.ReconcileInterval == 0 {
		o.ReconcileInterval = 10 * time.Second
	}
	if o.StatusFlushInterval == 0 {
		o.StatusFlushInterval = 200 * time.Millisecond
	}
	if o.ReadyTimeout == 0 {
		// A minute, or longer for a slow Raft: with --raft-heartbeat 1m (allowed,
		// for slow machines) no election was held before every voter of a cold
		// restart gave up at a minute, and under systemd they failed together for
		// good (a review).
		o.ReadyTimeout = max(time.Minute, o.Timeouts.FirstElectionWithin())
	}
	if o.SharedKeyGrace == 0 {
		o.SharedKeyGrace = api.SharedKeyGrace
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.operatorSweepEvery == 0 {
		o.operatorSweepEvery = 30 * time.Second
	}
	if o.expiryCheckEvery == 0 {
		o.expiryCheckEvery = 24 * time.Hour
	}
}

// now is the daemon's wall clock.
func (d *Daemon) now() time.Time { return d.opts.Now() }

// Daemon is a running control node.
type Daemon struct {
	opts  Options
	cfg   datadir.Config
	log   *slog.Logger
	caPEM []byte
	certs certificates
	curve nkeys.KeyPair
	fsm   *state.FSM
	raft  *replication.Node
	// raftOpened is when raft was opened: a follower that has heard no leader
	// since counts its silence from then (mesh_raft_last_contact_seconds).
	raftOpened time.Time
	broker     *broker.Server
	conns      *conns
	presence   *presence.Tracker
	// shutOut follows the connections of the accounts whose credentials the mesh
	// no longer trusts (revoked keys, removed control nodes' operator credentials),
	// to close them when they flood what they may still send.
	shutOut map[broker.Account]*presence.Tracker
	signer  *signer
	seen    *liveness
	status  *statusBatcher
	ctl     *controlTracker
	guard   *guard
	effects *effectQueue
	// authn decides who the broker admits; its tables are swept by sweepTables.
	authn *authn.Authenticator
	// ahead is the membership learnt ahead of the state (peers.go), from the log's
	// tail kept at start (read once, by aheadOnce) or from the members asked.
	ahead     aheadView
	tail      atomic.Pointer[replication.LogTail]
	aheadOnce sync.Once
	// web serves the metrics and health endpoints, if asked for: from the start of
	// Open (health only: a node waiting for a quorum says so), all of them once open.
	web      *webEndpoint
	metrics  *instruments
	registry *prometheus.Registry
	// internalToken is this process's own credential on its broker; it never
	// leaves the process.
	internalToken string
	// peersChanged asks for a presence listing now: the brokers this one is routed
	// to changed (watchRoutes).
	peersChanged chan struct{}
	// removed is closed when this control node is removed from the control plane.
	removed     chan struct{}
	removedOnce sync.Once
	// servedRecorded: mesh.json records that this node served (recordServed).
	servedRecorded atomic.Bool

	mu   sync.Mutex
	subs []*nats.Subscription
	// handlers are the API's handlers under way, waited for by Close.
	handlers handlers
	// adminMu serialises the operator API's changes (see readOnlyOp).
	adminMu sync.Mutex
	// changePending: a commit under adminMu was left pending (ErrCommitPending):
	// the next change's judgement waits for everything before it to apply.
	changePending atomic.Bool
	// currentTerm is the Raft term in which this node, leading, last applied
	// everything committed before serving a change (followLeadership's barrier, or
	// judgeSigner's): a change that waited its turn across a step-down and a new
	// term of this node is judged only once that term's barrier applied what the
	// terms between committed (a review).
	currentTerm atomic.Uint64
	// configApart is when each member was first seen holding another Raft
	// configuration than the leader's, configSpread when the leader last appended
	// its own again (spreadConfiguration; under adminMu).
	configApart    map[string]time.Time
	configApartKey string // the configuration and term configApart was seen against
	configSpread   time.Time
	// sent remembers the requests whose declarations this node sent (declaredAlready).
	sent sentRequests
	// keysMu serialises syncKeys: the leader's handler and the effects actor may
	// both run it.
	keysMu sync.Mutex
	// keyringMu holds a rotation from its look at the control nodes, whose curve
	// keys it seals the new key to, until this node signs with that key
	// (syncKeys); an admission seals the keys it hands its joiner under it. A
	// control node admitted in between was otherwise sealed neither copy of the new
	// key, and after the retire held no key of the keyring (a review).
	keyringMu sync.Mutex
	// enrolling holds the enrolments this node is carrying out, by token and key:
	// the same enrolment sent again meanwhile waits for it (sameEnrolment).
	enrolling enrolmentsInFlight
	// autopilotDue wakes autopilotLoop: the leader's heartbeat asks for a round.
	autopilotDue chan struct{}
	// resends bounds the log line about what reconcile re-sends, and
	// resendsSkipped the one about what it could not (the nodes' budgets).
	resends, resendsSkipped resendNotice
	// stampsAhead bounds refresh's line about declarations stamped further in
	// this node's future than their validity.
	stampsAhead resendNotice
	// forgetHeld bounds the line saying revoked records due to be forgotten are
	// kept while a control node on older rules may run.
	forgetHeld resendNotice
	// backups takes this node's backups (Options.Backup), nil when it takes none.
	backups *backup.Writer
}

// Open loads the data directory, starts Raft and waits until this node's state is
// current, initialises the mesh on first start, then starts the broker and the
// control plane's own client. The daemon serves nothing until Run.
func Open(ctx context.Context, opts Options) (_ *Daemon, err error) {
	opts.defaults()
	d := &Daemon{opts: opts, log: opts.Logger, fsm: state.NewFSM(), seen: newLiveness(), ctl: newControlTracker(),
		removed: make(chan struct{}), peersChanged: make(chan struct{}, 1), autopilotDue: make(chan struct{}, 1), effects: newEffectQueue(), metrics: newInstruments(),
		configApart: map[string]time.Time{}}
	d.guard = newGuard(opts.Logger, opts.Now, opts.Budgets)
	defer func() {
		if err != nil {
			d.recordRemoval(err)
			d.Close()
		}
	}()
	// The data directory's files, checked in turn (startChecks, which `meshctl
	// check` makes too), the first that cannot be used refused, naming it.
	files, err := loadStartFiles(opts.Dir, d.now())
	d.cfg = files.cfg
	if files.certs.leaf != nil {
		// Warned of even when a file read after them failed.
		d.certs = files.certs
		d.warnExpiry(d.now())
	}
	if err != nil {
		return nil, err
	}
	d.caPEM, d.curve = files.caPEM, files.curve
	d.removeFinishedJoinKeys()
	d.signer = newSigner(files.keys)
	if err := d.openBackups(); err != nil {
		return nil, err
	}
	mutual, serverTLS := files.mutual, files.server

	d.raft, err = replication.Open(replication.Config{
		Dir:             opts.Dir.Path(datadir.RaftDir),
		ID:              d.cfg.Node,
		Bind:            d.cfg.RaftListen,
		TLS:             mutual,
		FSM:             d.fsm,
		EmptyFSM:        func() raft.FSM { return state.NewFSM() },
		Timeouts:        opts.Timeouts,
		ApplyObserver:   func(took time.Duration) { d.metrics.raftApply.Observe(took.Seconds()) },
		PeerAllowed:     d.peerAllowed,
		Members:         d.answerMembers,
		LogAhead:        d.keepTail,
		Logger:          d.log,
		TermNotRecorded: opts.TermNotRecorded,
		Now:             opts.Now,
		// mesh.json is complete (LoadConfig refuses a join that did not): the
		// bootstrap's last step, or the join's confirmation, left state in the store.
		MustHoldState: true,
	})
	if err != nil {
		return nil, stateLost(err, d.cfg, opts.Dir)
	}
	d.raftOpened = time.Now()
	if opts.MetricsListen != "" {
		if d.web, err = startWeb(opts.MetricsListen, d.startingHandler(), opts.Logger); err != nil {
			return nil, err
		}
	}
	d.fsm.OnApply(d.applied)
	d.fsm.OnRestore(d.restored)
	d.fsm.OnUndecodable(func(index uint64, err error) {
		d.log.Error("an entry of the Raft log does not decode as a command, and was skipped: most likely garbled on this node's disk, so this node's state may no longer be the others'; remove this node and join it again on a fresh data directory (docs/operations.md, \"A damaged Raft store\")",
			"index", index, "err", err)
	})
	readyCtx, cancel := context.WithTimeout(ctx, opts.ReadyTimeout)
	defer cancel()
	// The snapshot restored at start may already say this node was removed: it
	// would wait for a leader that no longer talks to it.
	if err := d.checkNotRemoved(); err != nil {
		return nil, err
	}
	d.log.Info("waiting for the replicated state to be current", "node", d.cfg.Node)
	// An entry of a newer meshctl stops the state machine, and the wait with it.
	go func() {
		select {
		case <-d.fsm.Halted():
			cancel()
		case <-readyCtx.Done():
		}
	}()
	err = d.waitFollowing(readyCtx)
	if herr := d.fsm.HaltErr(); herr != nil {
		return nil, herr
	}
	if err != nil {
		return nil, err
	}
	d.forgetAhead()
	// From here on, applied commands' effects are carried out (once Run starts the
	// actor); those of the entries replayed so far are covered by what follows.
	d.effects.opened.Store(true)
	if err := d.initialise(); err != nil {
		return nil, err
	}
	if err := d.checkNotRemoved(); err != nil {
		return nil, err
	}
	if err := d.syncKeys(); err != nil {
		return nil, err
	}
	// The control nodes may have changed while this one was down.
	var brokers []string
	d.fsm.Read(func(s *state.State) { _, brokers = s.Membership() })
	d.saveBrokers(brokers)
	pins, routes := d.clusterPeers()
	d.warnUnpinned()

	internal := make([]byte, 32)
	if _, err := rand.Read(internal); err != nil {
		return nil, err
	}
	d.internalToken = hex.EncodeToString(internal)
	connect, disconnect, err := broker.ConnectionEvents(d.cfg.Mesh, broker.AccountHosts)
	if err != nil {
		return nil, err
	}
	events := []string{connect, disconnect}
	shutOutEvents := map[broker.Account][2]string{}
	for _, a := range []broker.Account{broker.AccountRevoked, broker.AccountRetired} {
		c, dc, err := broker.ConnectionEvents(d.cfg.Mesh, a)
		if err != nil {
			return nil, err
		}
		shutOutEvents[a] = [2]string{c, dc}
		events = append(events, c, dc)
	}
	d.authn = authn.New(authn.Config{Roster: d.fsm, Mesh: d.cfg.Mesh, InternalToken: d.internalToken, HostEvents: events,
		Logger:           d.log.With("component", "authn"),
		RequireBound:     opts.RequireBoundLogins,
		AwaitReplication: d.awaitReplication,
		Unbound:          func(kind string) { d.metrics.unbound.WithLabelValues(kind).Inc() }})
	var auth broker.Authenticator = d.authn
	if opts.wrapAuth != nil {
		auth = opts.wrapAuth(auth)
	}
	capacity := broker.ProcessCapacity(opts.MaxHosts)
	d.logCapacity(capacity)
	d.broker, err = broker.Start(ctx, broker.Config{
		Name:   d.cfg.Node,
		Mesh:   d.cfg.Mesh,
		Listen: d.cfg.Listen,
		TLS:    serverTLS,
		Auth:   auth,
		Logger: d.log,
		Flows: broker.Flows{
			HostStreams:      []string{api.NodePrefix + "*" + api.DeclarationSuffix},
			OperatorServices: []string{api.AdminPrefix + ">"},
			OperatorGathers:  []string{api.ControlStatusSubject},
			RetiredServices:  retiredServices(),
		},
		Cluster: &broker.ClusterConfig{Listen: d.cfg.ClusterListen, Routes: routes, TLS: mutual, Pins: pins},
		// Hosts wait until this node serves what they ask first (followLeadership):
		// a fleet reconnecting to a restarted node would otherwise share the cores
		// with the rest of its start.
		Admission: broker.Admission{Held: true},
		Capacity:  capacity,
	})
	if err != nil {
		return nil, err
	}
	if d.conns, err = dialConns(d.broker, d.internalToken, d.cfg.Node, d.guard.connError); err != nil {
		return nil, err
	}
	// Every control node hears the others' heartbeats, not the leader alone: a new
	// leader then knows at once which are alive, how far they applied, and where the
	// CA key is (it showed a live node "offline, never seen" for a few seconds).
	if _, err := d.conns.control.Subscribe(api.ControlPrefix+"*.heartbeat", d.handleHeartbeat); err != nil {
		return nil, fmt.Errorf("subscribe to the control nodes' heartbeats: %w", err)
	}
	// Every control node answers for itself, leader or not: with the quorum lost,
	// that is all an operator can ask.
	if _, err := d.conns.admin.Subscribe(api.ControlStatusSubject, d.handleControlStatus); err != nil {
		return nil, fmt.Errorf("subscribe to %s: %w", api.ControlStatusSubject, err)
	}
	d.presence, err = presence.Start(presence.Config{
		Conn: d.conns.events, Connect: connect, Disconnect: disconnect, Account: d.broker.AccountName(broker.AccountHosts),
		Reachable: d.broker.Reachable,
		OnChange:  d.connectionChanged, OnKicked: d.connectionKicked, Logger: d.log.With("component", "presence"), Now: opts.Now,
		Ignore: func(user string) bool { return strings.HasPrefix(user, "control-plane:") },
	})
	if err != nil {
		return nil, err
	}
	d.shutOut = map[broker.Account]*presence.Tracker{}
	for a, ev := range shutOutEvents {
		t, err := presence.Start(presence.Config{
			Conn: d.conns.events, Connect: ev[0], Disconnect: ev[1], Account: d.broker.AccountName(a),
			Reachable: d.broker.Reachable, Logger: d.log.With("component", "presence", "account", a.String()), Now: opts.Now,
		})
		if err != nil {
			return nil, err
		}
		d.shutOut[a] = t
	}
	d.status = newStatusBatcher(d)
	d.registry = d.newRegistry()
	d.registry.MustRegister(memoryCollector{d})
	if d.web != nil {
		d.web.serve(d.handler())
	}
	d.recordServed()
	// A stop asked for during the steps above, which do not wait on ctx: not
	// "ready" in the log, then a stop before ready (exit 9), as serve has it.
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	d.log.Info("control node ready", "mesh", d.cfg.Mesh, "node", d.cfg.Node, "broker", d.broker.Addr())
	return d, nil
}

// recordServed records in mesh.json that this node served (datadir.Config.Served),
// so that `meshctl bootstrap` run again after its Raft state was lost refuses to make
// a new, empty cluster. Only Open, as the node becomes ready, and the effects actor
// (a save that failed, tried again at the next reconcile tick) call it, as they do
// saveBrokers.
func (d *Daemon) recordServed() {
	if d.servedRecorded.Load() {
		return
	}
	cfg, err := d.opts.Dir.LoadConfig()
	if err == nil && !cfg.Served {
		cfg.Served = true
		err = d.opts.Dir.SaveConfig(cfg)
	}
	if err != nil {
		d.logRepeated(slog.LevelWarn, "mesh.json does not record yet that this node served; trying again at the next reconcile (until it does, meshctl bootstrap run here after a loss of raft/ would not refuse to make a new, empty mesh)", "err", err)
		return
	}
	d.servedRecorded.Store(true)
}

// removeFinishedJoinKeys removes the keys of this node's join (join-pending.json)
// left by a `meshctl join` stopped after it recorded the join as done, and before
// it removed them: nothing else would, and they were the node's private keys a
// second time, in every backup taken after. A file there it cannot remove, or that
// is not that join's, is warned of and left: it stops nothing.
func (d *Daemon) removeFinishedJoinKeys() {
	removed, err := d.opts.Dir.RemoveFinishedJoinKeys(d.cfg, d.curve)
	if removed {
		d.log.Info("removed the keys of this node's finished join, left by a join stopped at its last step", "file", d.opts.Dir.Path(datadir.JoinPendingFile))
	}
	if err != nil {
		d.log.Warn("a join's keys are left in the data directory", "err", err)
	}
}

// initialise applies the mesh's first command if the state is empty: the mesh id, the
// first keyring (epoch 1, this signing key, signed by it) and the operator account.
func (d *Daemon) initialise() error {
	var done bool
	d.fsm.Read(func(s *state.State) { done = s.Initialised() })
	if done || !d.raft.IsLeader() {
		return nil
	}
	keys := d.signer.currentKeys()
	key := keys[len(keys)-1]
	pub := key.Public().(ed25519.PublicKey)
	kr := declarations.Keyring{Mesh: d.cfg.Mesh, Epoch: 1, Keys: []string{hex.EncodeToString(pub)}, IssuedAt: d.now().UTC().Truncate(time.Second)}
	env, err := declarations.SignKeyring(kr, key)
	if err != nil {
		return fmt.Errorf("sign the first keyring: %w", err)
	}
	pin, operatorKey, err := d.identityKeys()
	if err != nil {
		return err
	}
	res, err := d.raft.Apply(state.Command{Op: state.OpInit, Init: &state.InitCmd{
		Mesh:         d.cfg.Mesh,
		AdminAccount: d.cfg.AdminAccount,
		Control: state.ControlNode{ID: d.cfg.Node, Broker: d.cfg.Brokers[0], Raft: d.cfg.RaftListen, Cluster: d.cfg.ClusterListen,
			CurveKey: curvePublic(d.curve), Pin: pin, Operator: operatorKey},
		Keyring:  state.Keyring{Epoch: kr.Epoch, Keys: kr.Keys, Envelope: env},
		Validity: declarations.DefaultValidity,
	}}, commitTimeout)
	if err != nil {
		// A full disk at the first start was a bare "commit init: write …: no space
		// left on device", exit 1; it is the data directory's, as while serving.
		if werr := d.opts.Dir.WriteFailed("initialise the mesh state", err); werr != err {
			return werr
		}
		return fmt.Errorf("initialise the mesh state: %w", err)
	}
	return res.Err
}

// identityKeys returns the pin of this node's TLS key and the public key of its
// operator credentials, as the state records them for a control node.
func (d *Daemon) identityKeys() (pin, operatorKey string, err error) {
	leaf, err := d.opts.Dir.LoadLeaf()
	if err != nil {
		return "", "", err
	}
	if pin, err = pki.LeafPinPEM(leaf.CertPEM); err != nil {
		return "", "", fmt.Errorf("%s: %w", d.opts.Dir.Path(datadir.TLSCertFile), err)
	}
	if operatorKey, err = d.opts.Dir.LoadOperatorKey(); err != nil {
		return "", "", err
	}
	return pin, operatorKey, nil
}

// BrokerAddr is the address the broker listens on.
func (d *Daemon) BrokerAddr() string { return d.broker.Addr() }

// Config returns this node's configuration.
func (d *Daemon) Config() datadir.Config { return d.cfg }

// FSM exposes the state machine for reads (tests, the demo).
func (d *Daemon) FSM() *state.FSM { return d.fsm }

// Run serves until ctx ends: it follows leadership, batches status reports and
// re-sends declarations nodes have not applied.
func (d *Daemon) Run(ctx context.Context) error {
	var g run.Group
	{
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error { return d.followLeadership(ctx) }, func(error) { cancel() })
	}
	{
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error { return d.status.run(ctx) }, func(error) { cancel() })
	}
	{
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error { return d.reconcileLoop(ctx) }, func(error) { cancel() })
	}
	{
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error { return d.heartbeatLoop(ctx) }, func(error) { cancel() })
	}
	{
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error { return d.autopilotLoop(ctx) }, func(error) { cancel() })
	}
	{
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error { return d.operatorSweepLoop(ctx) }, func(error) { cancel() })
	}
	{
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error { return d.watchRoutes(ctx) }, func(error) { cancel() })
	}
	{
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error { return d.runEffects(ctx) }, func(error) { cancel() })
	}
	{
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error { return d.syncPresence(ctx) }, func(error) { cancel() })
	}
	if d.web != nil {
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error { return d.web.run(ctx) }, func(error) { cancel() })
	}
	{
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error { return d.watchRemoved(ctx) }, func(error) { cancel() })
	}
	{
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error { return d.sweepTables(ctx) }, func(error) { cancel() })
	}
	{
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error { return d.watchExpiry(ctx) }, func(error) { cancel() })
	}
	if d.backups != nil {
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error { return d.backups.Run(ctx) }, func(error) { cancel() })
	}
	{
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error {
			select {
			case <-d.removed:
				return ErrRemoved
			case <-d.fsm.Halted():
				err := d.fsm.HaltErr()
				d.log.Error("the state machine stopped: this node stops serving", "err", err)
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		}, func(error) { cancel() })
	}
	err := g.Run()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	d.recordRemoval(err)
	return err
}

// recordRemoval writes down in the data directory that this node was removed, when
// err says so, so that the next serve or bootstrap refuses the directory at once.
func (d *Daemon) recordRemoval(err error) {
	if !errors.Is(err, ErrRemoved) || errors.As(err, new(*datadir.RemovedError)) {
		return
	}
	if err := d.opts.Dir.MarkRemoved(d.cfg.Node, d.opts.Now()); err != nil {
		d.log.Warn("could not record this node's removal in its data directory", "err", err)
	}
}

// followLeadership subscribes the API handlers while this node leads.
func (d *Daemon) followLeadership(ctx context.Context) error {
	if d.raft.IsLeader() {
		if err := d.serveAPI(); err != nil {
			return err
		}
	}
	d.broker.Open()
	for {
		select {
		case <-ctx.Done():
			// A leader stopped on purpose hands over before it stops serving: the
			// requests it still gets meanwhile are answered, those it can no longer
			// carry out as "not done" (meshctl sends them again to the new
			// leader), instead of finding no one subscribed in the gap.
			d.handOver()
			d.stopAPI()
			return ctx.Err()
		case leader := <-d.raft.LeaderChanges():
			if leader {
				d.seen.tookOver(d.now())
				if !untilCurrent(ctx, func() error { return d.raft.Barrier(commitTimeout) }, d.raft.IsLeader, time.Second, d.log) {
					continue
				}
				d.currentTerm.Store(d.raft.Status().Term)
				d.log.Info("this control node is now the leader; serving the API")
				if err := d.serveAPI(); err != nil {
					return err
				}
				d.effects.push(effect{kind: effectTellBrokers})
				d.closeRevokedConnections()
			} else {
				d.log.Info("this control node is no longer the leader; API handed over")
				d.stopAPI()
			}
		}
	}
}

// untilCurrent waits, for a node that became the leader, until it has applied
// everything committed before (barrier), trying again while it still leads: a
// barrier that timed out under load, given up on, left a leader that served no API
// until the next change of leader. It waits pause between tries (a barrier that
// failed at once must not spin). It reports whether the node may serve (false: it
// no longer leads, or ctx ended).
func untilCurrent(ctx context.Context, barrier func() error, leads func() bool, pause time.Duration, log *slog.Logger) bool {
	for {
		err := barrier()
		if err == nil {
			return true
		}
		if ctx.Err() != nil || errors.Is(err, replication.ErrNotLeader) || !leads() {
			log.Info("lost the leadership before serving the API", "err", err)
			return false
		}
		log.Warn("this new leader has not yet applied what was committed before it; trying again before it serves the API", "err", err)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(pause):
		}
	}
}

const queueGroup = "control-plane"

// commitTimeout is the timeout every change (a command, a membership change, a
// barrier) hands to Raft: how long it may wait for Raft to take it up, as
// hashicorp/raft defines it. A command Raft took then waits for its commit, or
// fails when the leader steps down for want of a quorum, or when a fifth more than
// this has passed (replication.ErrCommitPending: a log write that does not return, which
// hashicorp/raft's timeout does not bound; membership changes and barriers still
// wait on Raft alone). Each failure reaches the caller as "unavailable", which
// operators and hosts retry.
const commitTimeout = 10 * time.Second

// How many requests of a kind are handled at once.
const (
	enrolConcurrency = 64
	adminConcurrency = 8
	// adminChangesWaiting bounds the operators' changes taken at once: they are
	// carried out one at a time (adminMu), the rest wait their turn; past it, one
	// more is refused at once, nothing done (a log write that does not return
	// holds them all: ErrCommitPending frees each in time).
	adminChangesWaiting = 32
	// retiredConcurrency, retiredPendingMsgs and retiredPendingBytes bound what the
	// reads of removed control nodes' credentials take of the leader: a few at once,
	// and a short queue, past which nats.go drops them.
	retiredConcurrency  = 2
	retiredPendingMsgs  = 256
	retiredPendingBytes = 4 << 20
)

// serveAPI subscribes the leader's handlers, each on the connection of its role.
func (d *Daemon) serveAPI() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.subs) > 0 {
		return nil
	}
	handlers := []struct {
		nc      *nats.Conn
		subject string
		h       nats.MsgHandler
	}{
		// Enrolments wait on their Raft commit: many at once share the disk write.
		// One subscription for both subjects (mesh.enrol.<node> and
		// mesh.enrol.<node>.<key>): the connection holds fewer than the hosts'
		// cap, which nats-server treats as exceeded when a connection is at it as
		// it applies the account's limits again, at each reload of the broker (a
		// control node admitted or removed: broker.DefaultHostSubscriptions),
		// and closes the connection.
		{d.conns.hosts, api.EnrolPrefix + ">", d.handlers.concurrently(enrolConcurrency, d.handleEnrol)},
		{d.conns.hosts, api.NodePrefix + "*" + api.SyncSuffix, d.handlers.concurrently(runtime.GOMAXPROCS(0), d.handleSync)},
		// Status reports are cheap and batched; one at a time keeps a node's in order.
		{d.conns.hosts, api.NodePrefix + "*" + api.StatusSuffix, d.handleStatus},
		// Revoked nodes' keys ask on the same subjects, in an account of their own.
		{d.conns.revoked, api.NodePrefix + "*" + api.SyncSuffix, d.handleRevokedSync},
		// Operators' reads never wait behind another operator's change.
		{d.conns.admin, api.AdminPrefix + ">", d.adminDispatch()},
		// Removed control nodes' credentials read in a queue of their own.
		{d.conns.admin, api.RetiredPrefix + ">", d.handlers.concurrently(retiredConcurrency, d.handleRetired)},
	}
	for _, h := range handlers {
		sub, err := h.nc.QueueSubscribe(h.subject, queueGroup, h.h)
		if err != nil {
			return fmt.Errorf("subscribe %s: %w", h.subject, err)
		}
		if strings.HasPrefix(h.subject, api.RetiredPrefix) {
			// A flood of them is dropped here, in nats.go, not kept by the megabyte.
			_ = sub.SetPendingLimits(retiredPendingMsgs, retiredPendingBytes)
		}
		d.subs = append(d.subs, sub)
	}
	return d.conns.flush()
}

func (d *Daemon) stopAPI() {
	d.mu.Lock()
	defer d.mu.Unlock()
	var draining []*nats.Subscription
	for _, s := range d.subs {
		// An operator's request already received is answered, not dropped: a
		// change refused by a node that no longer leads says nothing was done
		// (AdminResponse.NotDone), and meshctl sends it again to the new leader.
		// Dropped, it left meshctl waiting its whole timeout. Hosts' requests are
		// dropped as before: their agents send them again after a short wait.
		if strings.HasPrefix(s.Subject, api.AdminPrefix) && s.Drain() == nil {
			draining = append(draining, s)
			continue
		}
		_ = s.Unsubscribe()
	}
	d.subs = nil
	deadline := time.Now().Add(apiDrain)
	for _, s := range draining {
		for s.IsDraining() && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		_ = s.Unsubscribe() // what a drain past apiDrain has left
	}
}

// apiDrain bounds how long stopAPI waits for the operator requests already received
// to be taken up by their handlers (then answered: handlers.wait).
const apiDrain = 500 * time.Millisecond

// restored runs after a snapshot replaced the state, on Raft's goroutine: on a
// follower the leader sent one to (too far behind for the log: cut off for a while
// from a busy mesh), the commands it stands for were never applied one by one, and
// their effects were not carried out. A rotation and retirement missed so kept this
// node signing with the retired key, which hosts refuse, once it led; a removal of
// another node left its routes and Raft connections open. Every effect that
// follows from the state as a whole is queued; each does nothing when nothing
// changed. At start the queue is not open yet, and opening covers it.
func (d *Daemon) restored() {
	d.effects.push(effect{kind: effectKeyring})
	d.effects.push(effect{kind: effectMembership})
	d.effects.push(effect{kind: effectOperatorsRemoved})
	d.effects.push(effect{kind: effectOperatorsRevoked})
	if d.checkNotRemoved() != nil {
		d.effects.push(effect{kind: effectRemoved})
	}
}

// applied runs after every command on every control node, on Raft's apply goroutine.
// It does nothing itself: what a command calls for on this node (taking up new
// signing keys, telling hosts of new brokers, stopping when removed) is queued for
// the effects actor, which runs once the broker exists (see effects.go).
func (d *Daemon) applied(c *state.Command, res state.Result) {
	if res.Err != nil {
		return
	}
	switch {
	case c.Op == state.OpRotate || c.Op == state.OpRetire:
		d.effects.push(effect{kind: effectKeyring})
	case c.Op == state.OpRevokeOperators:
		d.effects.push(effect{kind: effectOperatorsRevoked})
		d.effects.push(effect{kind: effectBackup})
	case c.Op == state.OpRevoke || c.Op == state.OpCancelTokens:
		// A backup from before a revocation restores a control plane that admits
		// the revoked nodes (the last note left it open); one from before a
		// cancellation, the tokens cancelled (a lost token, a review).
		d.effects.push(effect{kind: effectBackup})
	case c.Op == state.OpRemoveControl && c.RemoveControl != nil:
		d.effects.push(effect{kind: effectMembership})
		d.effects.push(effect{kind: effectOperatorsRemoved})
		d.effects.push(effect{kind: effectBackup})
		if c.RemoveControl.Node == d.cfg.Node {
			d.effects.push(effect{kind: effectRemoved})
		}
	case c.Op == state.OpControlServing && res.Control != nil && !res.Repeated:
		// A control node heard serving is listed: hosts get the new list.
		d.effects.push(effect{kind: effectMembership})
	case c.Op == state.OpEnrol && res.Control != nil && !res.Repeated:
		// A new machine under the id of one removed is not shown with what was
		// heard of that one (its last heartbeat said where the CA key was).
		d.ctl.forget(res.Control.ID)
		// A repeated admission changes no membership: hosts are not sent the same
		// list again for every retry of a joiner. One that lists no broker yet
		// (state.RulesBrokersWhenServing) changes what routes and Raft accept
		// only: hosts are sent the list once it is listed (OpControlServing).
		if res.Control.NeverServed {
			d.effects.push(effect{kind: effectPeers})
		} else {
			d.effects.push(effect{kind: effectMembership})
		}
	}
}

// Close stops everything the daemon started.
func (d *Daemon) Close() {
	d.stopAPI()
	d.handlers.wait()
	d.handOver()
	if d.web != nil {
		d.web.close()
	}
	if d.presence != nil {
		d.presence.Close()
	}
	for _, t := range d.shutOut {
		t.Close()
	}
	d.conns.close()
	if d.broker != nil {
		d.drainOperatorAnswers(answersDrain)
		d.broker.Shutdown()
	}
	if d.raft != nil {
		if err := d.raft.Close(); err != nil {
			d.log.Warn("raft shutdown", "err", err)
		}
	}
}

// handOverWait bounds how long a stopping leader waits for another voter to take
// its leadership over; a transfer takes a round trip and an election, milliseconds.
// With answersDrain it stays within the 3 s `meshctl serve` has to stop after a
// signal.
const handOverWait = time.Second

// handOver hands this node's leadership, if it leads, to another voter before it
// stops: the API's handlers have finished, and the others need not wait out an
// election timeout to serve again.
func (d *Daemon) handOver() {
	if d.raft == nil {
		return
	}
	start := time.Now()
	handed, err := d.raft.HandOver(handOverWait)
	switch {
	case err != nil:
		d.log.Warn("stopping without handing the leadership over: the other control nodes elect a leader once their election timeout passes", "err", err)
	case handed:
		d.log.Info("handed the leadership over to another control node before stopping", "took", time.Since(start).Round(time.Millisecond))
	}
}

// answersDrain bounds how long a stopping control node keeps its broker up for the
// answers to operator requests that came in through it and are on their way back
// from the leader: a rolling restart stops brokers that operators are connected to,
// and a change made there would be reported lost. A change commits in milliseconds;
// `meshctl serve` exits anyway 3 s after the signal (interruptGrace), and
// handOverWait comes first.
const answersDrain = 1500 * time.Millisecond

// drainOperatorAnswers waits, up to limit, until no operator request that came in
// through this node's broker still waits for its answer
// (broker.PendingOperatorAnswers). The API's own handlers have finished by now; the
// answers it waits for come from the leader, over the routes.
func (d *Daemon) drainOperatorAnswers(limit time.Duration) {
	n := d.broker.PendingOperatorAnswers()
	if n == 0 {
		return
	}
	d.log.Info("waiting for the answers to operator requests that came in through this broker before it stops", "pending", n)
	deadline := time.Now().Add(limit)
	for n > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		n = d.broker.PendingOperatorAnswers()
	}
	if n > 0 {
		d.log.Warn("answers to operator requests that came in through this broker are lost as it stops: those operators are told their connection was lost", "pending", n, "waited", limit)
	}
}

// removedAskAfter is how long a starting node waits to follow a leader before it asks
// the rest of the mesh whether it was removed, and then how often it asks again.
const removedAskAfter = 5 * time.Second

// membersAskAfter is how long a starting node waits to follow a leader before it
// asks the members it accepts which members they accept, and then how often.
const membersAskAfter = time.Second

// waitFollowing is Raft's WaitFollowing, for a node that may have been removed while
// it was down: its log does not say so, and no leader talks to it any more, so it
// would wait out ReadyTimeout and fail with a timeout, again at every restart. While
// it waits it asks the other control nodes, as an operator would (the data
// directory's credentials, over the pinned TLS), and stops with ErrRemoved when they
// list it as removed.
func (d *Daemon) waitFollowing(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	asked := make(chan struct{})
	go func() {
		defer close(asked)
		t := time.NewTicker(membersAskAfter)
		defer t.Stop()
		lastAsked := time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			// Its state may not list the member that leads now (peers.go).
			d.learnMembers()
			if time.Since(lastAsked) < removedAskAfter {
				continue
			}
			lastAsked = time.Now()
			if d.listedRemoved() {
				cancel(ErrRemoved)
				return
			}
		}
	}()
	err := d.raft.WaitFollowing(ctx)
	cancel(nil)
	<-asked
	if errors.Is(context.Cause(ctx), ErrRemoved) {
		return fmt.Errorf("%w: the other control nodes list %s as removed (meshctl control remove), or as another machine joined under its name since, and this one will not serve again. To bring the machine back, join it with a new control token and a fresh --data directory", ErrRemoved, d.cfg.Node)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		members, _ := d.raft.Members()
		storeErr := d.raft.LogWriteError()
		if storeErr == nil {
			storeErr = d.raft.SnapshotWriteError()
		}
		return notFollowing(err, d.cfg.Node, d.raft.Leader(), members, d.opts.ReadyTimeout, storeFailed(d.opts.Dir, storeErr))
	}
	return err
}

// storeFailed is err, a failed write of Raft's store under dir, said as the data
// directory's when it is a full or read-only disk (exit 7, as the same fault while
// serving, not a wait that ran out: exit 1), with what to do; nil stays nil, and
// any other error is said with what to look at.
func storeFailed(dir datadir.Dir, err error) error {
	if err == nil {
		return nil
	}
	if said := dir.WriteFailed("", err); said != err {
		return said
	}
	return fmt.Errorf("%w: mend the file system under %s, then start it again", err, dir)
}

// notFollowing says why a starting node did not catch up within waited, and what to
// do: with no leader, which voters it needs (a lost quorum restarted under systemd
// said only "context deadline exceeded", once a minute); with a store it could not
// write (storeErr), that (a full disk was "a large state to transfer, or a slow
// disk").
func notFollowing(err error, node, leader string, members []replication.Member, waited time.Duration, storeErr error) error {
	if storeErr != nil {
		return fmt.Errorf("%s could not write its Raft store within %s, and cannot join its cluster until it can: %w (%w)", node, waited, storeErr, err)
	}
	if leader != "" {
		return fmt.Errorf("%w: %s follows %s but had not applied its log within %s (a large state to transfer, or a slow disk); start it again to go on", err, node, leader, waited)
	}
	var voters []string
	for _, m := range members {
		if m.Voter {
			voters = append(voters, m.ID+" ("+m.Address+")")
		}
	}
	return fmt.Errorf("%w: no leader within %s. A leader needs %d of the %d voters of this node's Raft configuration running and reachable on their Raft ports: %s. "+
		"Start those that are down; `meshctl control status` on a running control node names the ones that answer. If they are lost for good, recover from the survivors (docs/operations.md, \"Recovering from lost quorum\")",
		err, waited, len(voters)/2+1, len(voters), strings.Join(voters, ", "))
}

// listedRemoved asks the control plane, through each of the other nodes' brokers in
// turn, whether this node is listed as removed. Any failure counts as "not listed":
// the wait goes on as it would without asking. One broker at a time: a broker of
// removed nodes back together routes to their own leader, which answers as they
// see it, and one answer through any broker was taken for the mesh's.
func (d *Daemon) listedRemoved() bool {
	return d.listedRemovedThrough(d.otherBrokers())
}

// listedRemovedThrough is listedRemoved's question through each of servers in turn.
func (d *Daemon) listedRemovedThrough(servers []string) bool {
	for _, server := range servers {
		if d.listedRemovedAt(server) {
			return true
		}
	}
	return false
}

// listedRemovedAt is listedRemoved's question through the broker at server.
func (d *Daemon) listedRemovedAt(server string) bool {
	c, err := operator.Dial(d.opts.Dir, operator.Options{Servers: []string{server}, Timeout: 2 * time.Second, LeaderWait: -1})
	if err != nil {
		return false
	}
	defer c.Close()
	var res api.NodesResult
	if err := c.Call(api.OpNodes, api.NodesRequest{Limit: 1}, &res); err != nil {
		return false
	}
	for _, cv := range res.Control {
		if cv.ID == d.cfg.Node {
			// Removed, or the id is another machine's now: this one was removed
			// and a machine joined under its name since. Before, that machine's
			// record read as this one's, active, and this one waited for a leader
			// that refused it, exited 1 after a minute, and was restarted for ever.
			return cv.Raft == api.RaftRemoved || cv.CurveKey != "" && cv.CurveKey != curvePublic(d.curve)
		}
	}
	return false
}

// membersNotFollowing lists the other members of this leader's Raft configuration
// not heard following it within three heartbeats.
func (d *Daemon) membersNotFollowing(now time.Time) []string {
	members, err := d.raft.Members()
	if err != nil {
		return nil // nothing known: nothing asked
	}
	var out []string
	for _, m := range members {
		if m.ID == d.cfg.Node {
			continue
		}
		if hb, at, ok := d.ctl.last(m.ID); !ok || hb.Leader != d.cfg.Node || now.Sub(at) > 3*HeartbeatInterval {
			out = append(out, m.ID)
		}
	}
	return out
}

// brokersOf lists the brokers of the control nodes ids, as the state records them;
// nil when it records none of them.
func (d *Daemon) brokersOf(ids []string) []string {
	var out []string
	d.fsm.Read(func(s *state.State) {
		for _, id := range ids {
			if c, ok := s.ControlNodes[id]; ok && c.Broker != "" {
				out = append(out, c.Broker)
			}
		}
	})
	return out
}

// otherBrokers lists the brokers of the other control nodes, from mesh.json: asking
// this node's own broker would reach nothing once the others stopped routing to it.
// Neither the address it advertises nor the one it listens on is asked: a node
// joined with --listen behind NAT asked its own broker there, heard no leader, and
// never stopped once removed (a docs walkthrough).
func (d *Daemon) otherBrokers() []string {
	e, err := operator.DirEndpoint(d.opts.Dir, false)
	if err != nil {
		return nil
	}
	own := []string{d.cfg.Listen}
	d.fsm.Read(func(s *state.State) {
		if c, ok := s.ControlNodes[d.cfg.Node]; ok {
			own = append(own, c.Broker)
		}
	})
	var out []string
	for _, b := range e.Servers {
		if !slices.Contains(own, b) {
			out = append(out, b)
		}
	}
	return out
}

// watchRemoved stops a running node the others removed while it could not hear of
// it: the leader cuts a removed node's Raft connections and routes as soon as the
// removal is applied, possibly before the node learnt that the entry committed. A
// node that hears no leader for removedAskAfter asks the others, as a starting node
// does (waitFollowing); so does a leader no other member follows: the only voter of
// its configuration, lost, removed by the survivors after their recovery, and back
// on its old disk, led a control plane of its own, minting tokens with the CA key (a
// docs walkthrough of "Losing the bootstrap machine"), and so does a leader some
// member does not follow: two removed voters back together on their old disks
// elected one of them, which its fellow followed, and led a control plane of their
// own (the last notes left it open). Asked, a member it cannot reach answers
// nothing, one that follows it answers through it, not removed: only the control
// plane that removed it says so.
func (d *Daemon) watchRemoved(ctx context.Context) error {
	return every(ctx, removedAskAfter, func() {
		// Raft's contact time is its own wall clock, hence time.Since.
		leader := d.raft.IsLeader()
		if c := d.raft.LastContact(); leader || !c.IsZero() && time.Since(c) < removedAskAfter {
			if d.raft.Current() {
				d.forgetAhead()
			}
			if !leader {
				return
			}
			lost := d.membersNotFollowing(d.now())
			if len(lost) == 0 {
				return
			}
			// Only the members that do not follow it are asked: those that
			// follow answer through this leader, and each broker asked costs a
			// dial of up to seconds, every removedAskAfter while a member is
			// down (a review).
			if servers := d.brokersOf(lost); len(servers) > 0 {
				if d.listedRemovedThrough(servers) {
					d.log.Warn("the other control nodes list this node as removed; stopping")
					d.removedOnce.Do(func() { close(d.removed) })
				}
				return
			}
		} else {
			// Its state may not list the member that leads now (peers.go).
			d.learnMembers()
		}
		if d.listedRemoved() {
			d.log.Warn("the other control nodes list this node as removed; stopping")
			d.removedOnce.Do(func() { close(d.removed) })
		}
	})
}

// checkNotRemoved refuses to serve a control node the control plane removed. The
// record must be this machine's, by its curve key: a new machine joined under a
// removed node's id starts from a snapshot that may still hold the removed
// machine's record, and catches up on its own admission from the log after it.
func (d *Daemon) checkNotRemoved() error {
	var err error
	d.fsm.Read(func(s *state.State) { err = removedIn(s, d.cfg.Node, d.curve) })
	return err
}

// removedIn returns ErrRemoved, saying so, when state s records that node, with
// curve as its curve key, was removed from the control plane.
func removedIn(s *state.State, node string, curve nkeys.KeyPair) error {
	mine := curvePublic(curve)
	c, ok := s.ControlNodes[node]
	if ok && c.Removed && (c.CurveKey == mine || c.CurveKey == "") {
		return fmt.Errorf("%w: %s was removed (meshctl control remove); it will not serve again. To bring the machine back, join it with a new control token and a fresh --data directory", ErrRemoved, node)
	}
	return nil
}

// logCapacity says how many hosts this node's broker will hold, and why: past that,
// hosts are refused and go to another control node (broker.ErrFull).
func (d *Daemon) logCapacity(c broker.Capacity) {
	if c.MaxHosts == 0 {
		d.log.Info("broker capacity: the open-file limit is unknown or unlimited; hosts are not capped")
		return
	}
	if asked := d.opts.MaxHosts; asked > c.MaxHosts {
		// Said, not taken silently: the cap applies, lower than asked.
		d.log.Warn("--max-hosts is above what the open-file limit allows: the lower cap applies", "max_hosts_asked", asked, "max_hosts", c.MaxHosts,
			"open_file_limit", c.OpenFiles, "hint", "raise the open-file limit (LimitNOFILE) for more hosts on this control node")
		return
	}
	d.log.Info("broker capacity", "max_hosts", c.MaxHosts, "max_connections", c.MaxConnections, "open_file_limit", c.OpenFiles,
		"hint", "each connection is a file descriptor: raise the open-file limit (LimitNOFILE) for more hosts on this control node")
}
