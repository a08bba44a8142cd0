package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// stats is what the agent counts for its /metrics. The loop writes it; the HTTP
// handler reads it, so it has a lock of its own.
type stats struct {
	mu        sync.Mutex
	connected bool
	synced    bool
	// broker is where the agent is connected; since when it connected or, not
	// connected, since when it has not been (its start, or the disconnection);
	// linkErr why it is not (the last attempt's error). For `meshhost status`.
	broker    string
	since     time.Time
	linkErr   string
	applied   uint64
	refused   map[string]uint64
	lastApply time.Duration
	// A copy of the applied state, refreshed whenever the loop saves it.
	version     uint64
	haveApplied bool
	epoch       uint64
	expiresAt   time.Time
	hooksFailed int
	// putBack counts the managed files put back as declared after they were
	// changed or removed on the host (checkFiles, a re-signed copy).
	putBack uint64
	// checkedAt is when the file check last compared the files; lastPutBackAt
	// and lastPutBack when it last put files back, and which (for meshhost status).
	checkedAt     time.Time
	lastPutBackAt time.Time
	lastPutBack   []string
	// lastPutBackCount is how many files the last put back wrote or removed.
	lastPutBackCount int
	// putBackFailed is why the last put back failed ("" once one succeeds).
	putBackFailed string
	// checkOff is why the file check cannot put files back, since when (zero
	// while it can).
	checkOff checkOffState
	// notKept is why the copy of the applied declaration could not be written
	// to the state directory ("" once it is).
	notKept string
	// unsaved is why the last save of the applied state failed ("" once one
	// succeeds): the state file is then behind the copy above.
	unsaved string
	// unsavedFailure is the apply or hook failure the agent reports while its
	// state is not saved ("" for none): the state file holds an older one.
	unsavedFailure string
	// unsavedNextAttempt is when the agent tries a failed declaration again,
	// while its state file is behind (zero: no retry owed).
	unsavedNextAttempt time.Time
	// sharedKey is what the mesh last said of another machine holding this
	// node's key (statusAnswered).
	sharedKey sharedKey
}

func (s *stats) set(f func(*stats)) {
	s.mu.Lock()
	f(s)
	s.mu.Unlock()
}

// Ready reports whether the agent is connected to the mesh and has synced since it
// connected: what /readyz answers.
func (a *Agent) Ready() bool {
	a.stats.mu.Lock()
	defer a.stats.mu.Unlock()
	return a.stats.connected && a.stats.synced
}

// Metric descriptions; the values are read from stats when scraped.
var (
	descAppliedVersion = prometheus.NewDesc("mesh_agent_applied_version",
		"The declaration version this node applied last (-1 before any).", nil, nil)
	descKeyringEpoch = prometheus.NewDesc("mesh_agent_keyring_epoch",
		"The keyring epoch this node accepted.", nil, nil)
	descApplied = prometheus.NewDesc("mesh_agent_declarations_applied_total",
		"Declarations applied since the agent started.", nil, nil)
	descRefused = prometheus.NewDesc("mesh_agent_envelopes_refused_total",
		"Envelopes refused or not applied since the agent started, by code (the verifier's, apply_failed, hook_failed).", []string{"code"}, nil)
	descLastApply = prometheus.NewDesc("mesh_agent_last_apply_duration_seconds",
		"How long the last successful apply took (verify excluded).", nil, nil)
	descConnected = prometheus.NewDesc("mesh_agent_connected",
		"1 while the agent is connected to a broker of the mesh.", nil, nil)
	descSynced = prometheus.NewDesc("mesh_agent_synced",
		"1 once the mesh acknowledged a sync on the current connection.", nil, nil)
	descHooksFailed = prometheus.NewDesc("mesh_agent_hooks_failed",
		"Hooks that failed and have not run again with success (meshhost hooks retry, a restart or a declaration runs them); the node is failing meanwhile.", nil, nil)
	descPutBack = prometheus.NewDesc("mesh_agent_files_put_back_total",
		"Managed files found changed or removed on this host (by hand, by another program) and put back as declared since the agent started.", nil, nil)
	descStale = prometheus.NewDesc("mesh_agent_stale",
		"1 when the applied declaration expired without a fresh one.", nil, nil)
	descCheckOff = prometheus.NewDesc("mesh_agent_file_check_off",
		"1 while the file check cannot put back files changed on this host: it holds no usable copy of the applied declaration (expired while the mesh was out of reach, or none kept); meshhost status says why and since when.", nil, nil)
	descBuildInfo = prometheus.NewDesc("mesh_agent_build_info",
		"1, labelled with the version of meshhost running (meshhost version), the commit it was built from (unknown when its build recorded none), and the mesh and node it runs as.",
		[]string{"version", "revision", "mesh", "node"}, nil)
)

// collector exports the agent's stats at scrape time.
type collector struct{ a *Agent }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descAppliedVersion, descKeyringEpoch, descApplied, descRefused, descLastApply, descConnected, descSynced, descStale, descCheckOff, descHooksFailed, descPutBack, descBuildInfo} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	a := c.a
	a.stats.mu.Lock()
	refused := make(map[string]uint64, len(a.stats.refused))
	for k, v := range a.stats.refused {
		refused[k] = v
	}
	connected, synced, applied, last := a.stats.connected, a.stats.synced, a.stats.applied, a.stats.lastApply
	version, have, epoch := a.stats.version, a.stats.haveApplied, a.stats.epoch
	stale := have && a.o.Now().After(a.stats.expiresAt)
	hooksFailed, putBack := a.stats.hooksFailed, a.stats.putBack
	checkOff := a.stats.checkOff.code != ""
	a.stats.mu.Unlock()
	appliedVersion := -1.0
	if have {
		appliedVersion = float64(version)
	}
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	gauge(descAppliedVersion, appliedVersion)
	gauge(descKeyringEpoch, float64(epoch))
	ch <- prometheus.MustNewConstMetric(descApplied, prometheus.CounterValue, float64(applied))
	for code, n := range refused {
		ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(n), code)
	}
	gauge(descLastApply, last.Seconds())
	gauge(descConnected, boolValue(connected))
	gauge(descSynced, boolValue(synced))
	gauge(descStale, boolValue(stale))
	gauge(descCheckOff, boolValue(checkOff))
	gauge(descHooksFailed, float64(hooksFailed))
	ch <- prometheus.MustNewConstMetric(descPutBack, prometheus.CounterValue, float64(putBack))
	ch <- prometheus.MustNewConstMetric(descBuildInfo, prometheus.GaugeValue, 1, orUnknown(a.o.Version), orUnknown(a.o.Revision), orUnknown(a.id.Mesh), orUnknown(a.id.Node))
}

// orUnknown is s, or "unknown" for "": Prometheus drops a label whose value is empty.
func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Registry returns a registry of the agent's metrics and its process's.
func (a *Agent) Registry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{a}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// What one client of the metrics endpoint may hold. The address is not
// authenticated: with only a header timeout, a stranger's thousands of keep-alive
// connections, one GET each and then silent, were held for minutes and took the
// process's file descriptors (on a control node, meshctl failed with it). A
// Prometheus scrape takes one or two connections and well under a second.
const (
	webReadHeaderTimeout = 5 * time.Second
	// webReadTimeout bounds reading a whole request; these take no body.
	webReadTimeout = 10 * time.Second
	// webWriteTimeout bounds writing an answer to a client that reads slowly.
	webWriteTimeout = 30 * time.Second
	// webIdleTimeout closes a keep-alive connection that sends no next request.
	webIdleTimeout = 30 * time.Second
	// webMaxConns caps the connections served at once; a connection beyond it
	// waits in the kernel's backlog, taking no descriptor, until one closes.
	webMaxConns = 64
)

// webLimits are the bounds the endpoint serves within: the constants above, and
// shorter ones in tests.
type webLimits struct {
	readHeader, read, write, idle time.Duration
	conns                         int
}

func defaultWebLimits() webLimits {
	return webLimits{readHeader: webReadHeaderTimeout, read: webReadTimeout, write: webWriteTimeout, idle: webIdleTimeout, conns: webMaxConns}
}

// serveHTTP serves /metrics, /healthz and /readyz on ln until ctx ends.
func (a *Agent) serveHTTP(ctx context.Context, ln net.Listener) {
	a.serveHTTPWithin(ctx, ln, defaultWebLimits())
}

// maxHeaderBytes bounds a request's header: a scrape's is a few hundred bytes, and
// Go's default (1 MiB) let any local user hold 64 MiB of the agent with 64
// connections (a local audit took it from 14 to 170 MB).
const maxHeaderBytes = 8 << 10

// metricsRetry is how often the agent tries again to take a metrics address another
// process held when it started.
const metricsRetry = 5 * time.Second

// serveHTTPWithin is serveHTTP with the bounds lim.
func (a *Agent) serveHTTPWithin(ctx context.Context, ln net.Listener, lim webLimits) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.Registry(), promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !a.Ready() {
			http.Error(w, "not ready: not connected to the mesh, or not synced since connecting", http.StatusServiceUnavailable)
			return
		}
		// Whose: another agent on the port answered for this one (a review).
		fmt.Fprintf(w, "ready: node %s of mesh %s\n", a.id.Node, a.id.Mesh)
	})
	// What the server itself reports (a connection it could not serve) is logged as
	// the agent's other lines are, not written bare to standard error.
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: lim.readHeader, ReadTimeout: lim.read, WriteTimeout: lim.write, IdleTimeout: lim.idle,
		MaxHeaderBytes: maxHeaderBytes, ErrorLog: slog.NewLogLogger(a.log.Handler(), slog.LevelWarn)}
	ln = newLimitListener(ln, lim.conns)
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		a.log.Error("the metrics endpoint stopped", "err", err)
	}
}

// publishState copies what the metrics show of the applied state; the loop calls it
// whenever the applied state changes.
func (a *Agent) publishState() {
	a.stats.set(func(s *stats) {
		s.version, s.haveApplied, s.epoch, s.expiresAt = a.applied.Version, a.applied.HaveApplied, a.keyring.Epoch, a.applied.ExpiresAt
		s.hooksFailed = len(a.applied.HooksFailed)
	})
}

// limitListener serves at most cap(slots) connections at once: Accept waits for a
// place, which a connection's Close frees. It is golang.org/x/net/netutil's (which
// the control plane uses), written out here: the host's dependencies are kept to
// the few integration/TestHostImportsNothingOfTheControlPlane allows.
type limitListener struct {
	net.Listener
	slots  chan struct{}
	closed chan struct{} // closed by Close: an Accept waiting for a place returns
	once   sync.Once
}

func newLimitListener(ln net.Listener, n int) *limitListener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, n), closed: make(chan struct{})}
}

// Accept waits for a place, then for a connection.
func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.closed:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: c, slots: l.slots}, nil
}

// Close stops accepting, also an Accept that waits for a place.
func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.once.Do(func() { close(l.closed) })
	return err
}

// limitConn frees its place once, however often it is closed.
type limitConn struct {
	net.Conn
	slots chan struct{}
	once  sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { <-c.slots })
	return err
}
