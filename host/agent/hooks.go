package agent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"mesh/host/hooks"
	"mesh/host/wire"
)

// HookGroupName is the file in the state directory that holds, while a hook runs,
// its process group (hooks.Config.WithGroupFile).
const HookGroupName = "hook.group"

// hookRun is one batch of hooks to run: the paths a declaration changed, and the
// paths of hooks that failed before, run again with it.
type hookRun struct {
	version  uint64
	changed  []string
	ran      []string
	failures []hooks.Failure
	// waiters are told the batch's outcome: `meshhost hooks retry` asked for it.
	waiters []hooksWaiter
	// notRetry: nobody acted (the file check put files back), so the batch does not
	// take along the paths of the hooks that failed before (queueHooks).
	notRetry bool
	// cut: the paths owed were cut since (state.Applied.HooksCut); the hooks are
	// told some were left out.
	cut bool
}

// run runs h's hooks, telling them when the paths owed were cut.
func (h *hookRun) run(ctx context.Context, cfg hooks.Config, root string) {
	if h.cut {
		h.ran, h.failures = cfg.RunCut(ctx, root, h.changed)
		return
	}
	h.ran, h.failures = cfg.Run(ctx, root, h.changed)
}

// maxOwedBytes is how much the paths of failed hooks the agent keeps owed may add
// up to before it cuts them to what the hooks' MESH_CHANGED can carry
// (hooks.Config.Bound: 64 KiB a hook).
const maxOwedBytes = 128 << 10

// pathsSize is how much paths add up to, a byte between each.
func pathsSize(paths []string) int {
	n := 0
	for _, p := range paths {
		n += len(p) + 1
	}
	return n
}

// HooksOutcome is what `meshhost hooks retry` is told once the hooks it asked for
// ran (see the agent's socket).
type HooksOutcome struct {
	// Nothing: no hook was owed or failed, so none ran.
	Nothing bool `json:"nothing,omitempty"`
	// Reloaded: the agent read the hooks file again for this request, as `meshhost
	// run` read it at start; the hooks it runs from now on are the file's as it is
	// now. An operator who edited the file learns that it is live.
	Reloaded bool `json:"reloaded,omitempty"`
	// NotReloaded says why the agent did not read the hooks file again: hooks ran or
	// waited their turn when asked (they ran as read before), or it runs without
	// one. Empty when Reloaded, or ConfigError says why the file cannot be used.
	NotReloaded string `json:"not_reloaded,omitempty"`
	// ConfigError: the hooks file, read again, cannot be used (why); nothing ran.
	ConfigError string `json:"config_error,omitempty"`
	// Ran are the hooks that ran, in order.
	Ran []string `json:"ran,omitempty"`
	// Failed are the hooks that failed, and Error why (their output's tail).
	Failed []string `json:"failed,omitempty"`
	Error  string   `json:"error,omitempty"`
	// Warnings are what the agent found of the hooks file it read again for this
	// request (hooks.Check: a command that cannot be run now, a pattern that does
	// not match as written), as its log says them: told to the operator who
	// edited the file, not only logged (a walkthrough).
	Warnings []string `json:"warnings,omitempty"`
	// Cleared are the hooks that had failed and whose failure is cleared though
	// they did not run: the hooks file, read again, no longer runs them for the
	// paths they failed for (removed, or their paths changed).
	Cleared []string `json:"cleared,omitempty"`
	// Owed are the changed paths whose hooks are still owed afterwards.
	Owed []string `json:"owed,omitempty"`
	// Unreported: the agent was not connected to the mesh when the hooks
	// finished. The outcome is in its applied state and its next report, sent as
	// soon as it reaches a broker; until then the control plane shows the node as
	// it last heard of it.
	Unreported bool `json:"unreported,omitempty"`
}

// Why the agent did not read the hooks file again for a retry (NotReloaded).
const (
	notReloadedBusy = "hooks were running or waiting their turn when asked: the agent reads the hooks file again only while none does, " +
		"so they ran as read before; run meshhost hooks retry again to read it"
	notReloadedNoFile = "the agent runs without a hooks file (meshhost run was started without --hooks)"
)

// hooksWaiter is a `meshhost hooks retry` waiting for a batch's outcome, with what
// became of the hooks file for its own request: requests answered by one batch may
// have found the file read again or not.
type hooksWaiter struct {
	reply       chan<- HooksOutcome
	reloaded    bool
	notReloaded string
	warnings    []string
}

// tell answers the waiter with out, and what became of the hooks file for it.
func (w hooksWaiter) tell(out HooksOutcome) {
	out.Reloaded, out.NotReloaded, out.Warnings = w.reloaded, w.notReloaded, w.warnings
	w.reply <- out // buffered, one value each
}

// queueHooks hands a batch to the hook worker, or, while it is busy, merges it into
// the batch that waits: hooks never run concurrently with each other, and a slow hook
// never keeps the loop from receiving, verifying, applying and reporting.
//
// A batch takes along the paths of hooks that failed and are owed since (the
// operator fixed the host, then asked for a retry, declared again, or restarted
// the agent): a failed hook runs again only when someone acts, never by itself.
func (a *Agent) queueHooks(h hookRun) {
	h.cut = h.cut || a.applied.HooksCut
	switch {
	case len(a.hookFailed) > 0 && !h.notRetry:
		h.changed = union(slices.Clone(h.changed), a.hookFailed)
		a.hookFailed = nil
	case len(a.hookFailed) > 0:
		// Nobody acted, but a failed hook that runs anyway for these changes takes
		// its failed paths along: its success ends its failure.
		if along := a.o.Hooks.RunAnyway(a.hookFailed, h.changed); len(along) > 0 {
			h.changed = union(slices.Sorted(slices.Values(h.changed)), along)
			a.hookFailed = slices.DeleteFunc(slices.Clone(a.hookFailed), func(p string) bool { return slices.Contains(along, p) })
		}
	}
	if a.hookJobs == nil { // not running (tests call handle directly)
		h.run(context.Background(), a.o.Hooks, a.o.Root)
		a.hooksFinished(h)
		return
	}
	if a.hookWaiting != nil {
		w := a.hookWaiting
		w.version = h.version
		w.cut = w.cut || h.cut
		for _, p := range h.changed {
			if !slices.Contains(w.changed, p) {
				w.changed = append(w.changed, p)
			}
		}
		w.waiters = append(w.waiters, h.waiters...)
		a.offerHooks()
		return
	}
	a.hookWaiting = &h
	a.offerHooks()
}

// offerHooks passes the waiting batch to the worker if it is free. While it runs one,
// the next waits here, counted owed and running (hooksRunning, HooksPending): handed
// to the worker's queue, it was counted neither, so the node reported converged as
// the first batch ended, and a stop or crash while the second ran lost it for good.
func (a *Agent) offerHooks() {
	if a.hookWaiting == nil || a.hookBusy {
		return
	}
	// A batch queued before the paths owed were cut is told of the cut as well:
	// its success clears the failure of the paths it takes along.
	a.hookWaiting.cut = a.hookWaiting.cut || a.applied.HooksCut
	select {
	case a.hookJobs <- *a.hookWaiting:
		a.hookWaiting = nil
		a.hookBusy = true
	default:
	}
}

// hooksRunning reports whether hooks of what the agent applied are queued or
// running: the node has not converged until they ran (reported to the mesh).
func (a *Agent) hooksRunning() bool { return a.hookBusy || a.hookWaiting != nil }

// runHooks is the hook worker: it runs one batch at a time until ctx ends.
func (a *Agent) runHooks(ctx context.Context, done chan<- hookRun) {
	for {
		select {
		case <-ctx.Done():
			return
		case h := <-a.hookJobs:
			h.run(ctx, a.o.Hooks, a.o.Root)
			select {
			case done <- h:
			case <-ctx.Done():
				return
			}
		}
	}
}

// hooksFinished records a batch's outcome, and passes on the batch that waited.
// A hook that failed stays owed (its paths in HooksPending) and the node reports
// hook_failed until it has run again and succeeded: the node is then failing, not
// converged, at the control plane.
// stillFailed is the hooks on record as failed (applied.HooksFailed) that match a
// path still failed (hookFailed), sorted: a hook that ran again for every path of
// its own that had failed, and succeeded, is not among them, nor one the hooks file
// no longer names.
func (a *Agent) stillFailed() []string {
	var out []string
	for _, k := range a.o.Hooks.Hooks {
		if !slices.Contains(a.applied.HooksFailed, k.Name) {
			continue
		}
		if len((hooks.Config{Hooks: []hooks.Hook{k}}).Matching(a.hookFailed)) > 0 {
			out = append(out, k.Name)
		}
	}
	slices.Sort(out)
	return out
}

func (a *Agent) hooksFinished(h hookRun) {
	a.hookBusy = false
	failedBefore := a.applied.HooksFailed
	var along []string
	if len(a.hookFailed) > 0 {
		// A batch queued before those hooks failed (a declaration applied while they
		// ran) ran every hook of these paths again, after the failure: its outcome is
		// theirs, as for a batch that takes them along (queueHooks). A failure in
		// it puts them back below.
		if along = a.o.Hooks.RunAnyway(a.hookFailed, h.changed); len(along) > 0 {
			a.hookFailed = slices.DeleteFunc(slices.Clone(a.hookFailed), func(p string) bool { return slices.Contains(along, p) })
		}
	}
	if len(h.ran) > 0 {
		a.log.Info("hooks ran after the change", "hooks", h.ran, "failed", len(h.failures), "version", h.version)
	}
	var failed []string
	if len(a.hookFailed) > 0 {
		// Hooks that failed before are failed still for the paths still failed;
		// one that ran again for all of its own and succeeded is named no more.
		failed = a.stillFailed()
	}
	errs := make([]error, 0, len(h.failures))
	var batchFailed []string
	for _, f := range h.failures {
		a.hookFailed = union(a.hookFailed, f.Paths)
		batchFailed = append(batchFailed, f.Hook)
		errs = append(errs, f)
	}
	failed = append(failed, batchFailed...)
	if len(along) > 0 && len(batchFailed) > 0 {
		// Those of a hook that failed again stay owed: they are not among its
		// failure's paths, which are this batch's.
		again := hooks.Config{Hooks: slices.DeleteFunc(slices.Clone(a.o.Hooks.Hooks), func(k hooks.Hook) bool { return !slices.Contains(batchFailed, k.Name) })}
		a.hookFailed = union(a.hookFailed, again.Matching(along))
	}
	if pathsSize(a.hookFailed) > maxOwedBytes {
		// A hook failing for weeks while declarations change new paths each
		// time: what its MESH_CHANGED can carry is kept, no more, and from now
		// until none is owed every hook that runs is told some were left out: a
		// hook given the paths kept in two runs of fewer would be told in neither.
		if kept := a.o.Hooks.Bound(a.hookFailed); len(kept) < len(a.hookFailed) {
			a.hookFailed = kept
			a.applied.HooksCut = true
		}
	}
	// Owed now: what waits for the worker, and what failed.
	var owed []string
	if a.hookWaiting != nil {
		owed = a.o.Hooks.Matching(a.hookWaiting.changed)
	}
	owed = union(slices.Sorted(slices.Values(owed)), a.hookFailed)
	out := HooksOutcome{Ran: h.ran, Failed: batchFailed, Owed: owed, Unreported: !a.online()}
	if len(h.failures) > 0 {
		// The declaration is applied and persisted; the failure is reported.
		a.applied.HooksPending = owed
		slices.Sort(failed)
		a.applied.HooksFailed = slices.Compact(failed)
		err := hookFailures(errs)
		out.Error = err.Error()
		a.failCode(wire.StatusHookFailed, err, h.version)
	} else {
		save := !slices.Equal(owed, a.applied.HooksPending)
		a.applied.HooksPending = owed
		if len(a.hookFailed) == 0 && (a.applied.LastErrorCode == wire.StatusHookFailed || len(a.applied.HooksFailed) > 0) {
			if a.applied.LastErrorCode == wire.StatusHookFailed {
				if len(h.ran) > 0 {
					a.log.Info("the hooks that had failed ran again and succeeded; the failure is cleared", "hooks", h.ran, "not_run", notRun(a.applied.HooksFailed, h.ran), "version", a.applied.LastErrorVersion)
				} else {
					// The hooks file changed since (the agent restarted, or hooks
					// retry read it again): no hook runs for the paths they were
					// owed any more.
					a.log.Info("the hooks that had failed no longer run for their paths (the hooks file changed): none ran; the failure is cleared", "failed", a.applied.HooksFailed, "paths", h.changed, "version", a.applied.LastErrorVersion)
				}
				a.applied.LastErrorCode, a.applied.LastError, a.applied.LastErrorVersion = "", "", 0
			}
			a.applied.HooksFailed = nil
			save = true
		}
		if len(owed) == 0 && a.applied.HooksCut {
			// Every hook owed ran, told some paths were left out, and succeeded.
			a.applied.HooksCut = false
			save = true
		}
		if len(a.hookFailed) > 0 && !slices.Equal(failed, a.applied.HooksFailed) {
			// Some of the failed ran again and succeeded, the others fail still.
			a.applied.HooksFailed = failed
			save = true
		}
		if save {
			a.save()
		}
	}
	// `hooks retry --json` printed {} of failures cleared this way (a walkthrough).
	out.Cleared = notRun(slices.DeleteFunc(slices.Clone(failedBefore), func(k string) bool { return slices.Contains(a.applied.HooksFailed, k) }), h.ran)
	for _, w := range slices.Concat(h.waiters, a.hookBusyWaiters) {
		w.tell(out)
	}
	a.hookBusyWaiters = nil
	a.offerHooks()
}

// notRun is those of failed that are not among ran, or nil: hooks whose failure is
// cleared though they did not run (the hooks file no longer runs them for their
// paths).
func notRun(failed, ran []string) []string {
	var out []string
	for _, k := range failed {
		if !slices.Contains(ran, k) {
			out = append(out, k)
		}
	}
	return out
}

// online reports whether the agent is connected to the mesh now: what it reports
// reaches the control plane.
func (a *Agent) online() bool { return a.conn != nil && a.conn.IsConnected() }

// retryHooks runs again the hooks that failed (`meshhost hooks retry`, through the
// agent's socket), and tells reply their outcome. While no hook runs or waits its
// turn it reads the hooks file again first, whatever is owed: an operator who edited
// the file and ran hooks retry with nothing owed believed the file was live, and the
// agent kept the hooks it had read at start (a walkthrough). Nothing owed: it says
// so at once, and that the file was read again.
func (a *Agent) retryHooks(reply chan<- HooksOutcome) {
	if a.hooksRunning() {
		a.retryBehind(hooksWaiter{reply: reply, notReloaded: notReloadedBusy})
		return
	}
	w, err := a.rereadHooks(reply)
	if err != nil {
		a.log.Warn("hooks retry: the hooks file cannot be used now; nothing ran, and the hooks read before are kept", "file", a.o.HooksFile, "err", err)
		reply <- HooksOutcome{ConfigError: err.Error()}
		return
	}
	if len(a.hookFailed) == 0 && len(a.applied.HooksPending) == 0 {
		w.tell(HooksOutcome{Nothing: true})
		return
	}
	// The worker is idle (nothing queued or running), and takes the hooks read
	// again with this job.
	a.log.Info("running again the hooks owed, as asked on this host", "paths", union(a.hookFailed, a.applied.HooksPending))
	a.queueHooks(hookRun{version: a.applied.Version, changed: slices.Clone(a.applied.HooksPending), waiters: []hooksWaiter{w}})
}

// retryBehind answers a retry asked for while hooks run or wait their turn: the
// worker reads the hooks, so the file is not read again, and the failed hooks run
// after those, as read before.
func (a *Agent) retryBehind(w hooksWaiter) {
	switch {
	case len(a.hookFailed) > 0:
		a.log.Info("running again the hooks that failed, once those running now finish, as asked on this host", "paths", a.hookFailed)
		a.queueHooks(hookRun{version: a.applied.Version, waiters: []hooksWaiter{w}})
	case a.hookWaiting != nil:
		a.hookWaiting.waiters = append(a.hookWaiting.waiters, w)
	default:
		a.hookBusyWaiters = append(a.hookBusyWaiters, w)
	}
}

// rereadHooks reads the hooks file again for a retry (reloadHooks), and returns the
// waiter for reply, told that it was read, or why not: the agent runs without one.
func (a *Agent) rereadHooks(reply chan<- HooksOutcome) (hooksWaiter, error) {
	w := hooksWaiter{reply: reply}
	if a.o.HooksFile == "" {
		w.notReloaded = notReloadedNoFile
		return w, nil
	}
	if err := a.reloadHooks(); err != nil {
		return w, err
	}
	a.log.Info("hooks retry: the hooks file was read again; its hooks run from now on", "file", a.o.HooksFile, "hooks", hookNames(a.o.Hooks))
	// As `meshhost run` says as it starts: now, not at the next change.
	for _, err := range a.o.Hooks.Check(a.o.Root) {
		a.log.Warn(hooks.Warning(err), "err", err)
		w.warnings = append(w.warnings, err.Error())
	}
	w.reloaded = true
	return w, nil
}

// reloadHooks reads the hooks file again, as `meshhost run` read it at start (not
// in the managed root, as sudo reads sudoers); on an error the hooks read before
// stay. Only while no hook is queued or running: the worker reads a.o.Hooks.
func (a *Agent) reloadHooks() error {
	if a.o.HooksFile == "" {
		return nil
	}
	if err := hooks.CheckApart(a.o.HooksFile, a.o.Root); err != nil {
		return err
	}
	cfg, err := hooks.Load(a.o.HooksFile)
	if err != nil {
		return err
	}
	a.o.Hooks = cfg.WithGroupFile(filepath.Join(a.o.StateDir, HookGroupName))
	return nil
}

// hookNames is the names of cfg's hooks, in the file's order.
func hookNames(cfg hooks.Config) []string {
	names := make([]string, 0, len(cfg.Hooks))
	for _, k := range cfg.Hooks {
		names = append(names, k.Name)
	}
	return names
}

// runOwedHooks queues the hooks a stopped or crashed agent owed (state.Applied's
// HooksPending: interrupted, or failed), as the agent starts; without hooks
// configured any more, it forgets them, and a failure of theirs.
func (a *Agent) runOwedHooks() {
	owed := a.applied.HooksPending
	if len(owed) == 0 && a.applied.LastErrorCode != wire.StatusHookFailed {
		return
	}
	if len(owed) == 0 {
		// A hook failed under an agent that did not keep what it owed (before
		// hooks retry): every managed path a hook runs for is owed.
		owed = a.o.Hooks.Matching(a.applied.Managed)
	}
	if len(a.o.Hooks.Hooks) == 0 || len(owed) == 0 {
		a.log.Warn("hooks were owed or had failed when the agent last stopped, and none are configured now, or none is owed: forgotten", "paths", owed)
		a.applied.HooksPending, a.applied.HooksFailed, a.applied.HooksCut = nil, nil, false
		if a.applied.LastErrorCode == wire.StatusHookFailed {
			a.applied.LastErrorCode, a.applied.LastError, a.applied.LastErrorVersion = "", "", 0
		}
		a.save()
		return
	}
	a.log.Info("running the hooks the agent owed when it last stopped (interrupted, or failed)", "paths", owed, "version", a.applied.Version)
	a.queueHooks(hookRun{version: a.applied.Version, changed: slices.Clone(owed)})
}

// hookFailures is the failures of one run of the hooks, said on one line. One is
// "hook a: why", as ever; several are named first, quoted, then each said:
// `hooks "a", "b" failed: hook a: why; hook b: why`. errors.Join's newline between
// them was flattened by what shows a node's error on one line into "timed out
// after 2s hook daemon: …", and meshctl named the first hook alone (a
// walkthrough); and the report, cut at 512 bytes, lost every hook after a first
// one's long output (a review): the names lead, for meshctl to read whole.
type hookFailures []error

func (e hookFailures) Error() string {
	parts := make([]string, len(e))
	var names []string
	for i, err := range e {
		parts[i] = err.Error()
		var f hooks.Failure
		if errors.As(err, &f) {
			names = append(names, strconv.Quote(clipName(f.Hook)))
		}
	}
	msg := strings.Join(parts, "; ")
	if len(e) > 1 && len(names) == len(e) {
		// The head stays short, within what the report keeps, whatever the hooks'
		// names: a dozen long ones filled it, and no reason was left (a review).
		head, shown := "", 0
		for _, n := range names {
			if shown > 0 && len(head)+len(n) > maxNamesShown {
				break
			}
			if shown > 0 {
				head += ", "
			}
			head += n
			shown++
		}
		if more := len(names) - shown; more > 0 {
			head += fmt.Sprintf(" (and %d more)", more)
		}
		msg = "hooks " + head + " failed: " + msg
	}
	return msg
}

// maxNamesShown bounds the names a report of several failed hooks begins with.
const maxNamesShown = 160

// Unwrap gives errors.Is and errors.As each failure.
func (e hookFailures) Unwrap() []error { return e }

// clipName is a hook's name as a report of several names it: at most 64 bytes, cut
// on a character's start.
func clipName(name string) string {
	const max = 64
	if len(name) <= max {
		return name
	}
	return runePrefix(name, max) + "…"
}

// runePrefix is s cut to at most n bytes, at the start of the character the cut
// falls in.
func runePrefix(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
