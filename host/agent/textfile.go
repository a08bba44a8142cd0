package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"mesh/host/statedir"
)

// TextfileInterval is how often the agent writes its metrics for a node
// exporter's textfile collector (Options.MetricsTextfile): about a scrape's interval.
const TextfileInterval = 15 * time.Second

// ErrTextfileName refuses a metrics textfile whose name a node exporter's textfile
// collector would not read: it reads only files ending in ".prom".
var ErrTextfileName = errors.New(`the metrics textfile must end in ".prom", the only files a node exporter's textfile collector reads`)

// CheckTextfile reports whether path can name the metrics textfile: a ".prom" file
// in a directory that exists.
func CheckTextfile(path string) error {
	if !strings.HasSuffix(path, ".prom") {
		return fmt.Errorf("--metrics-textfile %s: %w", path, ErrTextfileName)
	}
	dir := filepath.Dir(path)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("--metrics-textfile %s: its directory %s is not one (the node exporter's --collector.textfile.directory): %v", path, dir, err)
	}
	return nil
}

// textfileRegistry holds the agent's own metrics alone: a node exporter exports
// its own go_* and process_* families, and the same families from a textfile
// make it refuse the scrape's whole textfile collection as inconsistent.
func (a *Agent) textfileRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{a})
	return reg
}

// writeTextfiles writes the agent's metrics to path every interval until ctx
// ends, and removes the file then: a fleet's Prometheus cannot scrape 10,000
// agents' loopback endpoints, and the node exporter each host runs already is
// scraped; it exports the file's time (node_textfile_mtime_seconds), by which a
// dead agent's file, left by a crash, shows stale. Each write replaces the file
// whole (a new file renamed over it), so the collector never reads half of one.
func (a *Agent) writeTextfiles(ctx context.Context, path string, interval time.Duration) {
	if n := removeTextfileTemps(path); n > 0 {
		a.log.Info("removed the temporary metrics textfiles a stop part way through a write left", "count", n, "dir", filepath.Dir(path))
	}
	reg := a.textfileRegistry()
	failing := ""
	write := func() {
		err := writeTextfile(path, reg)
		switch {
		case err != nil && err.Error() != failing:
			a.log.Warn("the metrics textfile could not be written; trying again at the next interval", "path", path, "err", err)
			failing = err.Error()
		case err == nil && failing != "":
			a.log.Info("the metrics textfile is written again", "path", path)
			failing = ""
		}
	}
	write()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				a.log.Warn("the metrics textfile could not be removed as the agent stops: it shows the agent's last values until node_textfile_mtime_seconds says how old they are", "path", path, "err", err)
			}
			return
		case <-t.C:
			write()
		}
	}
}

// removeTextfileTemps removes the temporary files writeTextfile left beside path,
// an agent killed between their create and their rename (a write every interval),
// and returns how many: nothing else would, as the collector skips them. Once, as
// the agent starts writing. Only names of writeTextfile's pattern, and only
// regular files of the agent's user (the directory is the node exporter's, which
// others may write in), looked at without following a link.
func removeTextfileTemps(path string) int {
	dir, prefix := filepath.Dir(path), "."+filepath.Base(path)+"-"
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0 // the write says what is wrong with the directory
	}
	n := 0
	for _, e := range entries {
		name := e.Name()
		digits, ok := strings.CutPrefix(name, prefix)
		if ok {
			digits, ok = strings.CutSuffix(digits, ".tmp")
		}
		if !ok || digits == "" || strings.Trim(digits, "0123456789") != "" {
			continue
		}
		p := filepath.Join(dir, name)
		fi, err := os.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if uid, ok := statedir.FileOwner(fi); !ok || uid != os.Geteuid() {
			continue
		}
		if os.Remove(p) == nil {
			n++
		}
	}
	return n
}

// writeTextfile writes what g gathers to path in the text format, whole: a new
// file, made mode 0644 through its descriptor and renamed over path. It stands in
// for prometheus.WriteToTextfile, which chmods its temporary file by name: a textfile
// directory others may write in (a node exporter's, owned by its user or group) let
// them put a link in its place between the create and the chmod, and the agent, as
// root, made the link's target, identity.json or /etc/shadow, readable by everyone
// (a reviewer's race won after 18 writes). Here nothing after the create goes by
// name but the rename, which replaces a name and follows no link; what such a user
// can still do, replace the file's content, they could do to path itself.
func writeTextfile(path string, g prometheus.Gatherer) (err error) {
	mfs, err := g.Gather()
	if err != nil {
		return err
	}
	// A hidden name not ending in ".prom": the collector reads only those, and a
	// file left by a crash is not read as the agent's.
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*.tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(f, mf); err != nil {
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
