package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"mesh/host/enrol"
)

// Fleet is the hosts of a run.
type Fleet struct {
	Hosts []*Host
	log   *slog.Logger
	// checkFiles is the agents' file check interval (Config.CheckFiles).
	checkFiles time.Duration
}

// newFleet lays out n hosts under dir, named h-00001 and so on.
func newFleet(dir string, n int, log *slog.Logger) *Fleet {
	f := &Fleet{log: log}
	width := len(fmt.Sprint(n))
	for i := range n {
		f.Hosts = append(f.Hosts, newHost(dir, fmt.Sprintf("h-%0*d", max(width, 5), i+1)))
	}
	return f
}

// EnrolResult is the enrolment of the whole fleet.
type EnrolResult struct {
	Enrolled int `json:"enrolled"`
	// Failed hosts are not enrolled after every attempt; they are counted, not
	// dropped: every later phase reports against the whole fleet.
	Failed int `json:"failed"`
	// FailedAttempts counts the attempts that failed, by kind, including those a
	// retry made good.
	FailedAttempts map[string]int `json:"failed_attempts,omitempty"`
	// Examples is one message per kind of failure.
	Examples map[string]string `json:"examples,omitempty"`
	// Latency is one host's enrolment (its last attempt), start to identity saved.
	Latency Latency `json:"latency"`
}

// enrolAttempts is how many times a host tries before it counts as failed.
const enrolAttempts = 3

// enrolAll enrols every host, inflight at a time, each from its token.
func (f *Fleet) enrolAll(ctx context.Context, inflight int) EnrolResult {
	res := EnrolResult{FailedAttempts: map[string]int{}, Examples: map[string]string{}}
	var mu sync.Mutex
	var lat []time.Duration
	f.parallel(inflight, func(h *Host) {
		var err error
		var took time.Duration
		for attempt := 1; attempt <= enrolAttempts; attempt++ {
			start := time.Now()
			_, err = enrol.Enrol(ctx, enrol.Options{StateDir: h.StateDir, Token: h.Token})
			took = time.Since(start)
			if err == nil || !retryable(err) || ctx.Err() != nil {
				break
			}
			mu.Lock()
			res.FailedAttempts[enrolErrorKind(err)]++
			res.Examples[enrolErrorKind(err)] = err.Error()
			mu.Unlock()
			time.Sleep(time.Second)
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			res.Failed++
			res.FailedAttempts[enrolErrorKind(err)]++
			res.Examples[enrolErrorKind(err)] = err.Error()
			return
		}
		res.Enrolled++
		lat = append(lat, took)
	})
	res.Latency = Summarise(lat)
	return res
}

// retryable is an enrolment failure that running enrol again with the same token may
// cure, as the product's own messages advise.
func retryable(err error) bool {
	var re *enrol.RefusedError
	if errors.As(err, &re) {
		return re.Retryable()
	}
	return errors.Is(err, enrol.ErrUnreachable)
}

// enrolErrorKind names an enrolment error by the package's sentinel errors.
func enrolErrorKind(err error) string {
	var re *enrol.RefusedError
	switch {
	case errors.As(err, &re):
		return "refused:" + re.Code
	case errors.Is(err, enrol.ErrUnreachable):
		return "unreachable"
	case errors.Is(err, enrol.ErrBadAnswer):
		return "bad_answer"
	case errors.Is(err, enrol.ErrSave):
		return "save"
	case errors.Is(err, enrol.ErrToken):
		return "token"
	case errors.Is(err, enrol.ErrSubstituted):
		return "substituted"
	}
	return "other"
}

// StartResult is the start of every enrolled host's agent.
type StartResult struct {
	Started int `json:"started"`
	// NotStarted are agents whose New failed (identity or state unusable).
	NotStarted int `json:"not_started"`
	// Synced counts the agents that connected and finished their first sync (what
	// it brought applied); Slow those that had not within the start timeout.
	Synced int `json:"synced"`
	Slow   int `json:"slow"`
	// FirstSync is one agent's start to its first sync finished.
	FirstSync Latency `json:"first_sync"`
	// AllSyncedMs is the phase start to the last agent's first sync.
	AllSyncedMs float64  `json:"all_synced_ms"`
	Examples    []string `json:"examples,omitempty"`
}

// startTimeout is how long a starting agent holds its slot before the next one may
// start anyway.
const startTimeout = time.Minute

// startAll starts the agent of every host that has an identity. With inflight > 0,
// at most inflight agents are connecting at once: a slot frees when the agent has
// finished its first sync (connected, and what the sync brought applied: nothing
// when the empty first declaration was recorded at enrolment); with 0 they all
// start at once.
func (f *Fleet) startAll(inflight int) StartResult {
	var res StartResult
	var mu sync.Mutex
	var lat []time.Duration
	var last time.Time
	var wg sync.WaitGroup
	phaseStart := time.Now()
	sem := make(chan struct{}, max(inflight, 1))
	for _, h := range f.Hosts {
		if inflight > 0 {
			sem <- struct{}{}
		}
		synced := make(chan time.Time, 1)
		start := time.Now()
		err := h.start(f.log, f.checkFiles, func() { synced <- time.Now() })
		if err != nil {
			res.NotStarted++
			if len(res.Examples) < 5 {
				res.Examples = append(res.Examples, h.ID+": "+err.Error())
			}
			if inflight > 0 {
				<-sem
			}
			continue
		}
		res.Started++
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case at := <-synced:
				mu.Lock()
				res.Synced++
				lat = append(lat, at.Sub(start))
				if at.After(last) {
					last = at
				}
				mu.Unlock()
			case <-time.After(startTimeout):
				mu.Lock()
				res.Slow++
				mu.Unlock()
			}
			if inflight > 0 {
				<-sem
			}
		}()
	}
	wg.Wait()
	res.FirstSync = Summarise(lat)
	if !last.IsZero() {
		res.AllSyncedMs = ms(last.Sub(phaseStart))
	}
	return res
}

// running are the hosts whose agent is running.
func (f *Fleet) running() []*Host {
	var out []*Host
	for _, h := range f.Hosts {
		if h.done != nil {
			if ok, _, _ := h.exited(); !ok {
				out = append(out, h)
			}
		}
	}
	return out
}

// stopAll stops every agent, in parallel.
func (f *Fleet) stopAll() {
	f.parallel(256, func(h *Host) { h.stop() })
}

// parallel runs fn for every host, at most n at a time.
func (f *Fleet) parallel(n int, fn func(*Host)) {
	forEach(slices.Clone(f.Hosts), n, fn)
}

// forEach runs fn for every item, at most n at a time.
func forEach[T any](items []T, n int, fn func(T)) {
	work := make(chan T)
	var wg sync.WaitGroup
	for range max(n, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range work {
				fn(it)
			}
		}()
	}
	for _, it := range items {
		work <- it
	}
	close(work)
	wg.Wait()
}
