package agent

import (
	"context"
	"errors"
	"slices"

	"mesh/host/wire"
)

// hookRun is one batch of hooks to run: the paths a declaration changed.
type hookRun struct {
	version  uint64
	changed  []string
	ran      []string
	failures []error
}

// queueHooks hands a batch to the hook worker, or, while it is busy, merges it into
// the batch that waits: hooks never run concurrently with each other, and a slow hook
// never keeps the loop from receiving, verifying, applying and reporting.
func (a *Agent) queueHooks(h hookRun) {
	if a.hookJobs == nil { // not running (tests call handle directly)
		ran, failures := a.o.Hooks.Run(context.Background(), a.o.Root, h.changed)
		h.ran = ran
		for _, f := range failures {
			h.failures = append(h.failures, f)
		}
		a.hooksFinished(h)
		return
	}
	if a.hookWaiting != nil {
		w := a.hookWaiting
		w.version = h.version
		for _, p := range h.changed {
			if !slices.Contains(w.changed, p) {
				w.changed = append(w.changed, p)
			}
		}
		a.offerHooks()
		return
	}
	a.hookWaiting = &h
	a.offerHooks()
}

// offerHooks passes the waiting batch to the worker if it is free.
func (a *Agent) offerHooks() {
	if a.hookWaiting == nil {
		return
	}
	select {
	case a.hookJobs <- *a.hookWaiting:
		a.hookWaiting = nil
	default:
	}
}

// runHooks is the hook worker: it runs one batch at a time until ctx ends.
func (a *Agent) runHooks(ctx context.Context, done chan<- hookRun) {
	for {
		select {
		case <-ctx.Done():
			return
		case h := <-a.hookJobs:
			ran, failures := a.o.Hooks.Run(ctx, a.o.Root, h.changed)
			h.ran = ran
			for _, f := range failures {
				h.failures = append(h.failures, f)
			}
			select {
			case done <- h:
			case <-ctx.Done():
				return
			}
		}
	}
}

// hooksFinished records a batch's outcome, and passes on the batch that waited.
func (a *Agent) hooksFinished(h hookRun) {
	if len(h.ran) > 0 {
		a.log.Info("hooks ran after the change", "hooks", h.ran, "failed", len(h.failures), "version", h.version)
	}
	// Owed now: what waits for the worker, if anything.
	var owed []string
	if a.hookWaiting != nil {
		owed = a.o.Hooks.Matching(a.hookWaiting.changed)
		slices.Sort(owed)
	}
	if len(h.failures) > 0 {
		// The declaration is applied and persisted; the failure is reported.
		a.applied.HooksPending = owed
		a.failCode(wire.StatusHookFailed, errors.Join(h.failures...), h.version)
	} else if !slices.Equal(owed, a.applied.HooksPending) {
		a.applied.HooksPending = owed
		a.save()
	}
	a.offerHooks()
}

// runOwedHooks queues the hooks a stopped or crashed agent owed (state.Applied's
// HooksPending), as the agent starts; without hooks configured any more, it forgets
// them.
func (a *Agent) runOwedHooks() {
	owed := a.applied.HooksPending
	if len(owed) == 0 {
		return
	}
	if len(a.o.Hooks.Hooks) == 0 {
		a.log.Warn("hooks were owed when the agent last stopped, and none are configured now", "paths", owed)
		a.applied.HooksPending = nil
		a.save()
		return
	}
	a.log.Info("running the hooks the agent owed when it last stopped", "paths", owed, "version", a.applied.Version)
	a.queueHooks(hookRun{version: a.applied.Version, changed: slices.Clone(owed)})
}
