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

// TestTheTextfileIsMadeReadableThroughItsDescriptor (a reviewer's finding): the
// textfile was written by prometheus.WriteToTextfile, which chmods its temporary
// file by name. Another user able to write in the textfile directory (a node
// exporter's) swapped it for a link between the create and the chmod, and the
// agent, as root, made the link's target readable by everyone (identity.json, the
// node's seed). Here that user swaps every temporary file it sees for a link to a
// private file while the agent writes the textfile again and again: the private
// file stays private, and the textfile is readable by the collector.
func TestTheTextfileIsMadeReadableThroughItsDescriptor(t *testing.T) {
	f := newFixture(t)
	reg := f.a.textfileRegistry()
	dir := t.TempDir()
	path := filepath.Join(dir, "meshhost.prom")
	secret := filepath.Join(t.TempDir(), "identity.json")
	if err := os.WriteFile(secret, []byte("seed"), 0o600); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	swapped := make(chan int)
	go func() {
		n := 0
		defer func() { swapped <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				if e.Name() != "meshhost.prom" && e.Type().IsRegular() {
					p := filepath.Join(dir, e.Name())
					if os.Remove(p) == nil && os.Symlink(secret, p) == nil {
						n++
					}
				}
			}
		}
	}()
	writes := 0
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); writes++ {
		writeTextfile(path, reg) // fails when its file was swapped: what counts is what it did to the link's target
		if fi, err := os.Stat(secret); err != nil || fi.Mode().Perm() != 0o600 {
			close(stop)
			t.Fatalf("after %d writes the private file is %v (%v): the chmod went through a link", writes+1, fi.Mode().Perm(), err)
		}
	}
	close(stop)
	n := <-swapped
	t.Logf("%d writes, %d temporary files swapped for a link", writes, n)
	if n == 0 {
		t.Fatal("no temporary file was swapped: the test raced nothing")
	}
	if err := writeTextfile(path, reg); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644 {
		t.Fatalf("the textfile: %v, %v; want a regular file, mode 0644", fi.Mode(), err)
	}
}

// TestAKilledWritesTextfileIsRemoved (durability audit, finding 7): an agent killed
// between a metrics write's create and its rename left the temporary file in the
// node exporter's directory for good, one per kill. The agent removes its own as it
// starts writing: not a link of that name, nor other files.
func TestAKilledWritesTextfileIsRemoved(t *testing.T) {
	f := newFixture(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "meshhost.prom")
	leftover := filepath.Join(dir, ".meshhost.prom-2093847561.tmp")
	target := filepath.Join(dir, "target")
	link := filepath.Join(dir, ".meshhost.prom-12.tmp")
	keep := []string{filepath.Join(dir, ".meshhost.prom-x1.tmp"), filepath.Join(dir, "123.tmp"), filepath.Join(dir, ".other.prom-123.tmp"), target}
	for _, p := range append([]string{leftover}, keep...) {
		if err := os.WriteFile(p, []byte("# a write cut short\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // one write, then the stop
	f.a.writeTextfiles(ctx, path, time.Hour)
	if _, err := os.Lstat(leftover); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the killed write's temporary file is still there (%v)", err)
	}
	for _, p := range append(keep, link) {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}
