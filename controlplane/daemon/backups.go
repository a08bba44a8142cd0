package daemon

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"mesh/controlplane/backup"
	"mesh/controlplane/replication"
)

// BackupOptions are a control node's backups of itself (serve --backup-dir,
// decision 0037).
type BackupOptions struct {
	// Dir is the backup directory; it is made absolute, and created if missing.
	Dir string
	// Every is the interval between backups, backup.DefaultEvery when zero; Keep
	// how many are kept, backup.DefaultKeep when zero.
	Every time.Duration
	Keep  int
}

// openBackups prepares this node's backups, when asked for, before Raft opens: a
// backup directory serve may not use stops it as a data directory of the wrong
// owner or mode does. The backups are taken of d.raft once Run starts.
func (d *Daemon) openBackups() error {
	o := d.opts.Backup
	if o == nil {
		return nil
	}
	if o.Every == 0 {
		o.Every = backup.DefaultEvery
	}
	if o.Keep == 0 {
		o.Keep = backup.DefaultKeep
	}
	w, err := backup.New(backup.Config{Dir: o.Dir, Data: d.opts.Dir, Node: d.cfg.Node, CAPin: d.cfg.CAPin, Every: o.Every, Keep: o.Keep,
		Source: raftSource{d}, Logger: d.log, Now: d.opts.Now})
	if err != nil {
		return err
	}
	d.backups = w
	return nil
}

// raftSource is the daemon's Raft member as the backups' source: it is opened
// after the backups are prepared.
type raftSource struct{ d *Daemon }

func (s raftSource) BackUp(ctx context.Context, dir string) (replication.BackupStore, error) {
	return s.d.raft.BackUp(ctx, dir)
}

// Metrics of the backups, read from the writer when scraped; exported only by a
// node that takes backups, so that an alert on their age fires for those alone.
var (
	descBackupLast = prometheus.NewDesc("mesh_control_backup_last_success_timestamp_seconds",
		"When this control node's last backup that succeeded was taken (Unix time; at start, its newest in the backup directory; 0: none there, and serve takes one at once).", nil, nil)
	descBackupFailures = prometheus.NewDesc("mesh_control_backup_failures_total",
		"Backups of this control node that failed (the log says why; each is tried again at the next interval).", nil, nil)
	descBackupSize = prometheus.NewDesc("mesh_control_backup_last_size_bytes",
		"The size of this control node's last backup that succeeded, in bytes.", nil, nil)
	descBackupDuration = prometheus.NewDesc("mesh_control_backup_last_duration_seconds",
		"How long this control node's last backup that succeeded took to write (0 for one serve found at start).", nil, nil)
)

// backupCollector exports the backups' figures.
type backupCollector struct{ w *backup.Writer }

func (c backupCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBackupLast, descBackupFailures, descBackupSize, descBackupDuration} {
		ch <- d
	}
}

func (c backupCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.w.Stats()
	last := 0.0
	if !s.LastSuccess.IsZero() {
		last = float64(s.LastSuccess.UnixNano()) / 1e9
	}
	ch <- prometheus.MustNewConstMetric(descBackupLast, prometheus.GaugeValue, last)
	ch <- prometheus.MustNewConstMetric(descBackupFailures, prometheus.CounterValue, float64(s.Failures))
	ch <- prometheus.MustNewConstMetric(descBackupSize, prometheus.GaugeValue, float64(s.LastSize))
	ch <- prometheus.MustNewConstMetric(descBackupDuration, prometheus.GaugeValue, s.LastDuration.Seconds())
}
