package fleet

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// profiler takes CPU profiles of the phases whose name contains match: of this
// process (the agents) from the phase's start to its end, and of serve (through its
// --pprof endpoint) for the first seconds of the phase, since Go's profile endpoint
// runs for a duration given up front. Phases that end sooner wait for serve's.
type profiler struct {
	dir     string
	match   string
	seconds int
	serve   func() string // serve's metrics address, "" when it is not running
	out     io.Writer
}

// phaseProfile is a profile in progress.
type phaseProfile struct {
	p      *profiler
	base   string
	local  *os.File
	remote chan error
}

// gcCounters are what serve's /metrics says of its allocations so far.
type gcCounters struct {
	allocated float64 // go_memstats_alloc_bytes_total
	cycles    float64 // go_gc_duration_seconds_count
	ok        bool
}

// readGC reads serve's allocation counters from its /metrics.
func readGC(addr string) gcCounters {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return gcCounters{}
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return gcCounters{}
	}
	allocated, cycles := fams["go_memstats_alloc_bytes_total"], fams["go_gc_duration_seconds"]
	if len(allocated.GetMetric()) != 1 || len(cycles.GetMetric()) != 1 {
		return gcCounters{}
	}
	return gcCounters{
		allocated: allocated.GetMetric()[0].GetCounter().GetValue(),
		cycles:    float64(cycles.GetMetric()[0].GetSummary().GetSampleCount()),
		ok:        true,
	}
}

var unsafeName = regexp.MustCompile(`[^a-z0-9]+`)

func (p *profiler) begin(phase string) *phaseProfile {
	if p == nil || !strings.Contains(phase, p.match) {
		return nil
	}
	base := filepath.Join(p.dir, strings.Trim(unsafeName.ReplaceAllString(strings.ToLower(phase), "-"), "-"))
	pp := &phaseProfile{p: p, base: base}
	if f, err := os.Create(base + ".bench.pprof"); err == nil {
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(p.out, "   (no CPU profile of this process: %v)\n", err)
			f.Close()
		} else {
			pp.local = f
		}
	}
	if addr := p.serve(); addr != "" {
		// What serve allocated in the phase is the difference of these two:
		//	go tool pprof -sample_index=alloc_space -diff_base X.serve.allocs-start X.serve.allocs-end
		if err := fetchAllocs(addr, base+".serve.allocs-start"); err != nil {
			fmt.Fprintf(p.out, "   (no allocation profile of serve: %v)\n", err)
		}
		pp.remote = make(chan error, 1)
		go func() {
			pp.remote <- fetch(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, p.seconds), base+".serve.pprof", time.Duration(p.seconds+30)*time.Second)
		}()
	}
	return pp
}

func (pp *phaseProfile) end() {
	if pp == nil {
		return
	}
	if pp.local != nil {
		pprof.StopCPUProfile()
		pp.local.Close()
	}
	if pp.remote != nil {
		if addr := pp.p.serve(); addr != "" {
			// What serve allocated and how often it collected are the phase's line
			// (meter); this is where the allocations were made.
			if err := fetchAllocs(addr, pp.base+".serve.allocs-end"); err != nil {
				fmt.Fprintf(pp.p.out, "   (no allocation profile of serve: %v)\n", err)
			}
		}
		if err := <-pp.remote; err != nil {
			fmt.Fprintf(pp.p.out, "   (no CPU profile of serve: %v)\n", err)
		}
	}
	fmt.Fprintf(pp.p.out, "   profiles in %s\n", pp.p.dir)
}

// heap writes serve's heap profile to name in the profile directory.
func (p *profiler) heap(name string) {
	if p == nil {
		return
	}
	if addr := p.serve(); addr != "" {
		if err := fetch("http://"+addr+"/debug/pprof/heap", filepath.Join(p.dir, name+".serve.heap"), time.Minute); err != nil {
			fmt.Fprintf(p.out, "   (no heap profile of serve: %v)\n", err)
		}
	}
}

// fetchAllocs writes serve's allocation profile as of now to path. Go publishes a
// cycle's allocations in the profile only once a later collection has run, so two
// are forced (the first fetch is thrown away); the phase's CPU figures of serve
// then include them. The heap profile is asked for, with the allocations in it:
// net/http/pprof forces a collection for gc=1 on "heap" only, and "allocs?gc=1"
// returned the profile of serve's last collection of its own, the same bytes at the
// start and the end of a phase.
func fetchAllocs(addr, path string) error {
	if err := fetch("http://"+addr+"/debug/pprof/heap?gc=1", path, time.Minute); err != nil {
		return err
	}
	return fetch("http://"+addr+"/debug/pprof/heap?gc=1", path, time.Minute)
}

func fetch(url, path string, limit time.Duration) error {
	c := http.Client{Timeout: limit}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}
