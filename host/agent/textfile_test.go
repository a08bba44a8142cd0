package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestMetricsTextfile (audit of fleet observability, finding 7): a fleet's
// Prometheus cannot scrape 10,000 agents' loopback endpoints. The agent writes its
// own metrics, and only those (a node exporter exports go_* and process_* of its
// own, and refuses a textfile repeating them), to a .prom file its node exporter
// reads, again every interval, and removes it as it stops.
func TestMetricsTextfile(t *testing.T) {
	f := newFixture(t)
	path := filepath.Join(t.TempDir(), "meshhost.prom")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.a.writeTextfiles(ctx, path, 10*time.Millisecond)
	}()
	var families map[string]bool
	deadline := time.Now().Add(5 * time.Second)
	for {
		data, err := os.ReadFile(path)
		if err == nil {
			parser := expfmt.NewTextParser(model.UTF8Validation)
			parsed, perr := parser.TextToMetricFamilies(strings.NewReader(string(data)))
			if perr != nil {
				t.Fatalf("the textfile does not parse: %v\n%s", perr, data)
			}
			families = map[string]bool{}
			for name := range parsed {
				families[name] = true
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no textfile written: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, want := range []string{"mesh_agent_applied_version", "mesh_agent_connected", "mesh_agent_build_info"} {
		if !families[want] {
			t.Errorf("the textfile lacks %s: %v", want, families)
		}
	}
	for name := range families {
		if !strings.HasPrefix(name, "mesh_agent_") {
			t.Errorf("the textfile holds %s, which a node exporter exports of its own", name)
		}
	}
	cancel()
	<-done
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the textfile is left after the agent stopped: %v", err)
	}
}

// TestCheckTextfile: a name the textfile collector would not read, or a directory
// that is not one, is refused before the agent starts.
func TestCheckTextfile(t *testing.T) {
	dir := t.TempDir()
	if err := CheckTextfile(filepath.Join(dir, "meshhost.prom")); err != nil {
		t.Errorf("a .prom file in a directory: %v", err)
	}
	if err := CheckTextfile(filepath.Join(dir, "meshhost.txt")); !errors.Is(err, ErrTextfileName) {
		t.Errorf("a file not ending in .prom: %v", err)
	}
	if err := CheckTextfile(filepath.Join(dir, "nosuch", "meshhost.prom")); err == nil {
		t.Error("a directory that does not exist was taken")
	}
}
