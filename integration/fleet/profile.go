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
	local  *os.File
	remote chan error
}

var unsafeName = regexp.MustCompile(`[^a-z0-9]+`)

func (p *profiler) begin(phase string) *phaseProfile {
	if p == nil || !strings.Contains(phase, p.match) {
		return nil
	}
	base := filepath.Join(p.dir, strings.Trim(unsafeName.ReplaceAllString(strings.ToLower(phase), "-"), "-"))
	pp := &phaseProfile{p: p}
	if f, err := os.Create(base + ".bench.pprof"); err == nil {
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(p.out, "   (no CPU profile of this process: %v)\n", err)
			f.Close()
		} else {
			pp.local = f
		}
	}
	if addr := p.serve(); addr != "" {
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
