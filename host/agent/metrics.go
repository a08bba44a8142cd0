package agent

import (
	"context"
	"errors"
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
	// unsaved is why the last save of the applied state failed ("" once one
	// succeeds): the state file is then behind the copy above.
	unsaved string
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
	descStale = prometheus.NewDesc("mesh_agent_stale",
		"1 when the applied declaration expired without a fresh one.", nil, nil)
)

// collector exports the agent's stats at scrape time.
type collector struct{ a *Agent }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descAppliedVersion, descKeyringEpoch, descApplied, descRefused, descLastApply, descConnected, descSynced, descStale, descHooksFailed} {
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
	hooksFailed := a.stats.hooksFailed
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
	gauge(descHooksFailed, float64(hooksFailed))
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

// serveHTTP serves /metrics, /healthz and /readyz on ln until ctx ends.
func (a *Agent) serveHTTP(ctx context.Context, ln net.Listener) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.Registry(), promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !a.Ready() {
			http.Error(w, "not ready: not connected to the mesh, or not synced since connecting", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	// What the server itself reports (a connection it could not serve) is logged as
	// the agent's other lines are, not written bare to standard error.
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ErrorLog: slog.NewLogLogger(a.log.Handler(), slog.LevelWarn)}
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
