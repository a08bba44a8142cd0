package daemon

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metric descriptions. Values are read from the daemon's own counters when scraped,
// so nothing is counted twice.
var (
	descDropped = prometheus.NewDesc("mesh_control_messages_dropped_total",
		"Messages the control plane dropped without acting on or answering them, by subject and reason.",
		[]string{"subject", "reason"}, nil)
	descRefused = prometheus.NewDesc("mesh_control_requests_refused_total",
		"Requests the control plane answered with a refusal, by subject and reason (the protocol's code).",
		[]string{"subject", "reason"}, nil)
	descKicked = prometheus.NewDesc("mesh_control_budget_disconnects_total",
		"Nodes disconnected for exceeding a budget, by reason.",
		[]string{"reason"}, nil)
	descHostConns = prometheus.NewDesc("mesh_control_host_connections",
		"Connections open in the hosts account on every broker of the mesh, as nats-server's events report them.",
		nil, nil)
)

// collector exports the daemon's counters.
type collector struct{ d *Daemon }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descDropped
	ch <- descRefused
	ch <- descKicked
	ch <- descHostConns
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	n := c.d.guard.snapshot()
	for k, v := range n.Dropped {
		ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(v), k.Subject, string(k.Reason))
	}
	for k, v := range n.Refused {
		ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(v), k.Subject, string(k.Reason))
	}
	for r, v := range n.Kicked {
		ch <- prometheus.MustNewConstMetric(descKicked, prometheus.CounterValue, float64(v), string(r))
	}
	ch <- prometheus.MustNewConstMetric(descHostConns, prometheus.GaugeValue, float64(c.d.presence.Count()))
}

// Registry returns a Prometheus registry with the daemon's metrics and the process's.
func (d *Daemon) Registry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{d}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Ready reports whether this control node can serve: a leader is known.
func (d *Daemon) Ready() bool { return d.raft.Leader() != "" }

// serveHTTP serves /metrics, /healthz and /readyz on ln until ctx ends.
func (d *Daemon) serveHTTP(ctx context.Context, ln net.Listener) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.Registry(), promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !d.Ready() {
			http.Error(w, "no Raft leader known: this control node cannot serve yet", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return ctx.Err()
}
