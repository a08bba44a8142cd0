package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"mesh/host/hooks"
	"mesh/host/state"
	"mesh/host/wire"
)

// failingUntilFixed is a hooks file whose one hook fails until the file fixed
// exists, and counts its runs in a file of its own.
func failingUntilFixed(t *testing.T) (cfg hooks.Config, fixed string, runs func() int) {
	t.Helper()
	dir := t.TempDir()
	fixed, count := filepath.Join(dir, "fixed"), filepath.Join(dir, "runs")
	p := filepath.Join(dir, "hooks.json")
	script := `echo run >> ` + count + `; test -e ` + fixed + ` || { echo "app.service: failed to start: port in use" >&2; exit 1; }`
	js, _ := json.Marshal(map[string]any{"hooks": []any{map[string]any{"name": "restart-app", "paths": []string{"etc/*"}, "run": []string{"sh", "-c", script}}}})
	if err := os.WriteFile(p, js, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := hooks.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, fixed, func() int {
		b, _ := os.ReadFile(count)
		return strings.Count(string(b), "run")
	}
}

func (f *fixture) withHooks(t *testing.T, cfg hooks.Config) *Agent {
	t.Helper()
	f.a.kp.Wipe()
	a, err := New(Options{StateDir: f.dir, Root: f.root, Hooks: cfg, Now: func() time.Time { return t0 }, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	f.a = a
	return a
}

func reported(t *testing.T, a *Agent) wire.Status {
	t.Helper()
	var st wire.Status
	if err := json.Unmarshal(a.statusReport(), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestAFailedHookStaysOwedUntilItSucceeds: a hook that failed after the files were
// written keeps the node reporting hook_failed, and its paths owed, across a
// declaration of the same body (which runs it again) and a restart, until it runs
// again and succeeds; only then is the failure cleared. Before, the failed hook's
// paths were dropped at once, and the same body declared again cleared hook_failed
// without running the hook: the node looked converged with its service down.
func TestAFailedHookStaysOwedUntilItSucceeds(t *testing.T) {
	f := newFixture(t)
	cfg, fixed, runs := failingUntilFixed(t)
	a := f.withHooks(t, cfg)
	ctx := context.Background()
	if err := a.handle(ctx, f.decl(t, 1, "x")); err != nil {
		t.Fatal(err)
	}
	check := func(when string, wantCode string, wantVersion uint64, wantRuns int) {
		t.Helper()
		st := reported(t, a)
		code, ver := "", uint64(0)
		if st.Error != nil {
			code, ver = st.Error.Code, st.Error.Version
		}
		if code != wantCode || ver != wantVersion || runs() != wantRuns {
			t.Fatalf("%s: reported %q v%d after %d runs; want %q v%d after %d", when, code, ver, runs(), wantCode, wantVersion, wantRuns)
		}
		on, err := state.Load(f.dir)
		if err != nil {
			t.Fatal(err)
		}
		wantOwed, wantFailed := []string(nil), []string(nil)
		if wantCode != "" {
			wantOwed, wantFailed = []string{"etc/app.conf"}, []string{"restart-app"}
		}
		if !slices.Equal(on.HooksPending, wantOwed) || !slices.Equal(on.HooksFailed, wantFailed) || on.LastErrorCode != wantCode {
			t.Fatalf("%s: on record owed %q, failed %q, error %q", when, on.HooksPending, on.HooksFailed, on.LastErrorCode)
		}
	}
	check("after the hook failed", wire.StatusHookFailed, 1, 1)
	if msg := reported(t, a).Error.Message; !strings.Contains(msg, "restart-app") || !strings.Contains(msg, "port in use") {
		t.Fatalf("the report does not name the hook and its output's end: %q", msg)
	}

	// The same body declared again: nothing changes on disk, and the hook runs again.
	if err := a.handle(ctx, f.decl(t, 2, "x")); err != nil {
		t.Fatal(err)
	}
	check("after the same body was declared again, not fixed", wire.StatusHookFailed, 2, 2)

	// A restart runs it again too: still failing.
	a = f.withHooks(t, cfg)
	a.runOwedHooks()
	check("after a restart, not fixed", wire.StatusHookFailed, 2, 3)

	// The operator fixes the host and asks for a retry.
	if err := os.WriteFile(fixed, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	reply := make(chan HooksOutcome, 1)
	a.retryHooks(reply)
	out := <-reply
	if !slices.Equal(out.Ran, []string{"restart-app"}) || len(out.Failed) != 0 || len(out.Owed) != 0 {
		t.Fatalf("retry outcome %+v", out)
	}
	check("after the retry, fixed", "", 0, 4)

	// Nothing owed: a retry runs nothing and says so.
	a.retryHooks(reply)
	if out := <-reply; !out.Nothing || runs() != 4 {
		t.Fatalf("a retry with nothing owed: %+v, %d runs", out, runs())
	}
}

// TestHooksRunningIsReported: while the hooks of an applied declaration wait for
// the worker or run, the node's report says so, and the control plane does not
// call it converged before they ran (declare --wait would otherwise exit 0 before
// a hook that then fails).
func TestHooksRunningIsReported(t *testing.T) {
	f := newFixture(t)
	cfg, _, _ := failingUntilFixed(t)
	a := f.withHooks(t, cfg)
	a.hookJobs = make(chan hookRun) // a worker that never takes the batch
	if err := a.handle(context.Background(), f.decl(t, 1, "x")); err != nil {
		t.Fatal(err)
	}
	if st := reported(t, a); !st.HooksRunning || st.AppliedVersion != 1 || st.Error != nil {
		t.Fatalf("report with the hook queued: %+v", st)
	}
	a.hooksFinished(*a.hookWaiting)
	a.hookWaiting = nil
	if st := reported(t, a); st.HooksRunning {
		t.Fatalf("report once the hooks ran: %+v", st)
	}
}

// TestRetryThroughTheSocket: `meshhost hooks retry` reaches the running agent
// through its socket in the state directory (0600), which runs the failed hooks and
// answers with their outcome; no agent there is ErrNoAgent.
func TestRetryThroughTheSocket(t *testing.T) {
	// A socket's path is at most 107 bytes: t.TempDir's can be longer.
	dir, err := os.MkdirTemp("", "mh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	f := newFixtureIn(t, dir)
	cfg, fixed, _ := failingUntilFixed(t)
	a := f.withHooks(t, cfg)
	if err := a.handle(context.Background(), f.decl(t, 1, "x")); err != nil {
		t.Fatal(err)
	}
	if _, err := RetryHooks(dir, 5*time.Second); !errors.Is(err, ErrNoAgent) {
		t.Fatalf("no agent listening: %v, want ErrNoAgent", err)
	}
	answerRetries(t, a, dir)
	if fi, err := os.Stat(SocketPath(dir)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	out, err := RetryHooks(dir, 10*time.Second)
	if err != nil || len(out.Failed) != 1 || !strings.Contains(out.Error, "port in use") {
		t.Fatalf("retry before the fix: %+v, %v", out, err)
	}
	os.WriteFile(fixed, nil, 0o600)
	out, err = RetryHooks(dir, 10*time.Second)
	if err != nil || len(out.Failed) != 0 || !slices.Equal(out.Ran, []string{"restart-app"}) {
		t.Fatalf("retry after the fix: %+v, %v", out, err)
	}
}

// TestAHookFailureOutlivesAFailedSave: a save that fails as a hook fails leaves
// hook_failed reported (the save's failure is said by `meshhost status`); once the
// state is saved again the node still reports hook_failed, not nothing. Before,
// the save's failure took the hook's place, and clearing it left no error: the
// node looked converged with its hook failed.
func TestAHookFailureOutlivesAFailedSave(t *testing.T) {
	f := newFixture(t)
	cfg, _, _ := failingUntilFixed(t)
	a := f.withHooks(t, cfg)
	a.hookJobs = make(chan hookRun) // the test runs the batch itself
	if err := a.handle(context.Background(), f.decl(t, 1, "x")); err != nil {
		t.Fatal(err)
	}
	h := *a.hookWaiting
	a.hookWaiting = nil
	h.ran, h.failures = a.o.Hooks.Run(context.Background(), a.o.Root, h.changed)
	restore := breakSaves(t, f.dir)
	a.hooksFinished(h)
	if st := reported(t, a); st.Error == nil || st.Error.Code != wire.StatusHookFailed || st.Error.Version != 1 {
		t.Fatalf("with saves failing: reported %+v, want hook_failed v1", st.Error)
	}
	if u := a.linkStatus().Unsaved; u == nil || u.Error == "" {
		t.Fatalf("with saves failing the agent says %+v, want why it is not saved", u)
	}
	restore()
	a.saveAgain()
	st := reported(t, a)
	if st.Error == nil || st.Error.Code != wire.StatusHookFailed || st.Error.Version != 1 || !strings.Contains(st.Error.Message, "port in use") {
		t.Fatalf("saved again: reported %+v, want hook_failed v1 with the hook's output", st.Error)
	}
	if on, err := state.Load(f.dir); err != nil || on.LastErrorCode != wire.StatusHookFailed || !slices.Equal(on.HooksPending, []string{"etc/app.conf"}) {
		t.Fatalf("on record: %q owed %q (%v)", on.LastErrorCode, on.HooksPending, err)
	}
}

// TestAHookFailureOfAnOlderAgentIsRetriedAtStart: the state of an agent from before
// failed hooks were kept owed holds hook_failed and nothing owed; this agent, as it
// starts, runs the hooks of every managed path they match, and clears the failure
// once they succeed, instead of forgetting it unrun or keeping it for good.
func TestAHookFailureOfAnOlderAgentIsRetriedAtStart(t *testing.T) {
	f := newFixture(t)
	if err := f.a.handle(context.Background(), f.decl(t, 1, "x")); err != nil {
		t.Fatal(err)
	}
	old := f.a.Applied()
	old.LastErrorCode, old.LastError, old.LastErrorVersion = wire.StatusHookFailed, "hook restart-app: exit status 1", 1
	if err := state.Save(f.dir, old); err != nil {
		t.Fatal(err)
	}
	cfg, fixed, runs := failingUntilFixed(t)
	os.WriteFile(fixed, nil, 0o600)
	a := f.withHooks(t, cfg)
	a.runOwedHooks()
	if st := reported(t, a); st.Error != nil || runs() != 1 {
		t.Fatalf("after the start: reported %+v after %d runs, want no error after 1", st.Error, runs())
	}
}

// TestASecondBatchWaitsOwed: hooks owed by a declaration applied while the hooks of
// the one before run are owed, and the node reports hooks running, until they too
// have run. They were handed to the worker's queue at once and counted nowhere: as
// the first batch ended the node reported converged, and an agent stopped while the
// second ran owed nothing at its restart.
func TestASecondBatchWaitsOwed(t *testing.T) {
	f := newFixture(t)
	cfg, fixed, _ := failingUntilFixed(t)
	os.WriteFile(fixed, nil, 0o600)
	a := f.withHooks(t, cfg)
	a.hookJobs = make(chan hookRun, 1) // as Run makes it
	ctx := context.Background()
	if err := a.handle(ctx, f.declFiles(t, 1, "etc/a.conf")); err != nil {
		t.Fatal(err)
	}
	first := <-a.hookJobs // the worker takes the first batch, and runs it
	if err := a.handle(ctx, f.declFiles(t, 2, "etc/a.conf", "etc/b.conf")); err != nil {
		t.Fatal(err)
	}
	first.ran, first.failures = a.o.Hooks.Run(ctx, a.o.Root, first.changed)
	a.hooksFinished(first)
	if st := reported(t, a); !st.HooksRunning || st.AppliedVersion != 2 {
		t.Fatalf("the first batch ran, the second not yet: reported %+v, want v2 with hooks running", st)
	}
	if on, err := state.Load(f.dir); err != nil || !slices.Contains(on.HooksPending, "etc/b.conf") {
		t.Fatalf("on record as the second batch is handed over: owed %q (%v), want etc/b.conf", on.HooksPending, err)
	}
	second := <-a.hookJobs
	second.ran, second.failures = a.o.Hooks.Run(ctx, a.o.Root, second.changed)
	a.hooksFinished(second)
	if st := reported(t, a); st.HooksRunning {
		t.Fatalf("both batches ran: reported %+v, hooks still running", st)
	}
	if on, _ := state.Load(f.dir); len(on.HooksPending) != 0 {
		t.Fatalf("both batches ran, and %q is owed on record", on.HooksPending)
	}
}

// TestAFailureEndsWithABatchQueuedBeforeIt: a declaration applied while a hook ran
// (v2 arrives as v1's restart runs, and that restart fails: it saw v2 half written)
// queues the same hook for its own paths; that batch runs after the failure and
// succeeds, and the node is converged. Before, it stayed hook_failed with v1's
// output (meshctl status and declare --wait exit 5) until someone ran `meshhost
// hooks retry`, which restarted the service once more for nothing.
func TestAFailureEndsWithABatchQueuedBeforeIt(t *testing.T) {
	f := newFixture(t)
	cfg, fixed, runs := failingUntilFixed(t)
	a := f.withHooks(t, cfg)
	a.hookJobs = make(chan hookRun, 1) // as Run makes it
	ctx := context.Background()
	if err := a.handle(ctx, f.declFiles(t, 1, "etc/a.conf")); err != nil {
		t.Fatal(err)
	}
	first := <-a.hookJobs // the worker takes v1's batch
	if err := a.handle(ctx, f.declFiles(t, 2, "etc/a.conf", "etc/b.conf")); err != nil {
		t.Fatal(err)
	}
	first.ran, first.failures = a.o.Hooks.Run(ctx, a.o.Root, first.changed)
	a.hooksFinished(first)
	if st := reported(t, a); st.Error == nil || st.Error.Code != wire.StatusHookFailed {
		t.Fatalf("v1's hook failed: reported %+v, want hook_failed", st.Error)
	}
	if err := os.WriteFile(fixed, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	second := <-a.hookJobs // v2's batch, queued before the failure
	second.ran, second.failures = a.o.Hooks.Run(ctx, a.o.Root, second.changed)
	a.hooksFinished(second)
	if st := reported(t, a); st.Error != nil || st.HooksRunning || runs() != 2 {
		t.Fatalf("the hook ran again for v2 and succeeded: reported %+v (hooks running %v) after %d runs, want no error after 2", st.Error, st.HooksRunning, runs())
	}
	if on, err := state.Load(f.dir); err != nil || len(on.HooksPending) != 0 || len(on.HooksFailed) != 0 || on.LastErrorCode != "" {
		t.Fatalf("on record: owed %q, failed %q, error %q (%v), want nothing", on.HooksPending, on.HooksFailed, on.LastErrorCode, err)
	}
}

// TestAFailedHookNoLongerConfiguredIsNotSaidToHaveRun: a hook that failed and was
// then taken out of the hooks file (the agent restarted with another hook for other
// paths) no longer runs; its failure is cleared, and the log says that none ran.
// Before, the log said "the hooks that had failed ran again and succeeded" of a
// hook that never ran.
func TestAFailedHookNoLongerConfiguredIsNotSaidToHaveRun(t *testing.T) {
	f := newFixture(t)
	cfg, _, runs := failingUntilFixed(t)
	a := f.withHooks(t, cfg)
	if err := a.handle(context.Background(), f.decl(t, 1, "x")); err != nil {
		t.Fatal(err)
	}
	if st := reported(t, a); st.Error == nil || st.Error.Code != wire.StatusHookFailed || runs() != 1 {
		t.Fatalf("reported %+v after %d runs, want hook_failed after 1", st.Error, runs())
	}
	other, err := hooks.Load(writeHooks(t, `{"hooks":[{"name":"reload-db","paths":["db/*"],"run":["true"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	a = f.withHooks(t, other)
	var logged bytes.Buffer
	a.log = slog.New(slog.NewTextHandler(&logged, nil))
	a.runOwedHooks()
	if st := reported(t, a); st.Error != nil || runs() != 1 {
		t.Fatalf("after a restart without the failed hook: reported %+v after %d runs, want no error and no run", st.Error, runs())
	}
	if strings.Contains(logged.String(), "ran again and succeeded") || !strings.Contains(logged.String(), "none ran; the failure is cleared") {
		t.Fatalf("the log of a failure cleared with nothing run:\n%s", logged.String())
	}
}

// loadHooks writes v, a hooks file's document, and loads it.
func loadHooks(t *testing.T, v any) hooks.Config {
	t.Helper()
	js, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := hooks.Load(writeHooks(t, string(js)))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func writeHooks(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "hooks.json")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAHookThatFailsAgainStaysOwedForEveryPath: a hook failed for etc/a.conf, and
// a batch queued before that failure (a put back of etc/b.conf) runs it again, and
// it fails again: both paths stay owed, so that the retry runs it for both. Taking
// the first failure's paths as the batch's outcome must not drop them when that
// outcome is another failure.
func TestAHookThatFailsAgainStaysOwedForEveryPath(t *testing.T) {
	f := newFixture(t)
	cfg, _, runs := failingUntilFixed(t)
	a := f.withHooks(t, cfg)
	a.hookJobs = make(chan hookRun, 1) // as Run makes it
	ctx := context.Background()
	if err := a.handle(ctx, f.declFiles(t, 1, "etc/a.conf", "etc/b.conf")); err != nil {
		t.Fatal(err)
	}
	first := <-a.hookJobs
	first.changed = []string{"etc/a.conf"}
	a.queueHooks(hookRun{version: 1, changed: []string{"etc/b.conf"}, notRetry: true})
	first.ran, first.failures = a.o.Hooks.Run(ctx, a.o.Root, first.changed)
	a.hooksFinished(first)
	second := <-a.hookJobs
	second.ran, second.failures = a.o.Hooks.Run(ctx, a.o.Root, second.changed)
	a.hooksFinished(second)
	on, err := state.Load(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"etc/a.conf", "etc/b.conf"}; !slices.Equal(on.HooksPending, want) || runs() != 2 {
		t.Fatalf("the hook failed twice (%d runs): owed on record %q, want %q", runs(), on.HooksPending, want)
	}
	if st := reported(t, a); st.Error == nil || st.Error.Code != wire.StatusHookFailed {
		t.Fatalf("reported %+v, want hook_failed", st.Error)
	}
}

// TestAFailedHookThatRanAgainIsNoLongerNamed: two hooks failed (reload-a for
// etc/a.conf, reload-b for etc/b.conf); a batch queued before the failure runs
// reload-a again, which succeeds now. reload-b is still failing and its path still
// owed; reload-a is no longer named among the failed hooks (meshhost status listed
// it "FAILED" until every failure was cleared).
func TestAFailedHookThatRanAgainIsNoLongerNamed(t *testing.T) {
	f := newFixture(t)
	dir := t.TempDir()
	fixA := filepath.Join(dir, "a-fixed")
	p := filepath.Join(dir, "hooks.json")
	js, _ := json.Marshal(map[string]any{"hooks": []any{
		map[string]any{"name": "reload-a", "paths": []string{"etc/a.conf"}, "run": []string{"sh", "-c", "test -e " + fixA}},
		map[string]any{"name": "reload-b", "paths": []string{"etc/b.conf"}, "run": []string{"false"}},
	}})
	if err := os.WriteFile(p, js, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := hooks.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	a := f.withHooks(t, cfg)
	a.hookJobs = make(chan hookRun, 1) // as Run makes it
	ctx := context.Background()
	if err := a.handle(ctx, f.declFiles(t, 1, "etc/a.conf", "etc/b.conf")); err != nil {
		t.Fatal(err)
	}
	first := <-a.hookJobs
	if err := a.handle(ctx, f.declFiles(t, 2, "etc/a.conf", "etc/b.conf")); err != nil {
		t.Fatal(err)
	}
	first.ran, first.failures = a.o.Hooks.Run(ctx, a.o.Root, first.changed)
	a.hooksFinished(first)
	if got := a.applied.HooksFailed; !slices.Equal(got, []string{"reload-a", "reload-b"}) {
		t.Fatalf("after both failed: failed hooks %q", got)
	}
	if err := os.WriteFile(fixA, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	second := <-a.hookJobs // v2's, queued before the failure: it runs both again
	second.changed = []string{"etc/a.conf"}
	second.ran, second.failures = a.o.Hooks.Run(ctx, a.o.Root, second.changed)
	a.hooksFinished(second)
	on, err := state.Load(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(on.HooksFailed, []string{"reload-b"}) || !slices.Equal(on.HooksPending, []string{"etc/b.conf"}) || on.LastErrorCode != wire.StatusHookFailed {
		t.Fatalf("on record after reload-a succeeded: failed %q, owed %q, error %q; want reload-b failing for etc/b.conf", on.HooksFailed, on.HooksPending, on.LastErrorCode)
	}
}

// TestPathsOwedToAFailingHookAreBounded (leak review, finding 5): a hook failing for
// weeks while each declaration changed new paths (dated or versioned file names)
// kept every changed path owed, in memory and in the applied state rewritten at
// every apply. Past maxOwedBytes they are cut to what the hook's MESH_CHANGED can
// carry: the hook still runs and fails; and from the cut until nothing is owed, every
// run is told some paths were left out (review 28c: a hook given the paths kept in
// runs of fewer was told in none), through a restart too.
func TestPathsOwedToAFailingHookAreBounded(t *testing.T) {
	f := newFixture(t)
	dir := t.TempDir()
	fixed, seen := filepath.Join(dir, "fixed"), filepath.Join(dir, "seen")
	script := `echo "omitted=${MESH_CHANGED_OMITTED:-0}" >> ` + seen + `; test -e ` + fixed + ` || { echo "port in use" >&2; exit 1; }`
	load := func(pattern string) hooks.Config {
		return loadHooks(t, map[string]any{"hooks": []any{map[string]any{"name": "restart-app", "paths": []string{pattern}, "run": []string{"sh", "-c", script}}}})
	}
	cfg := load("etc/*")
	runs := func() []string {
		b, _ := os.ReadFile(seen)
		return strings.Fields(string(b))
	}
	a := f.withHooks(t, cfg)
	const rounds, each = 16, 40
	long := strings.Repeat("x", 240)
	for v := range uint64(rounds) {
		paths := make([]string, each)
		for i := range paths {
			paths[i] = fmt.Sprintf("etc/%s-%02d-%03d", long, v, i)
		}
		if err := a.handle(context.Background(), f.declFiles(t, v+1, paths...)); err != nil {
			t.Fatal(err)
		}
	}
	on, err := state.Load(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs()) != rounds || !slices.Equal(on.HooksFailed, []string{"restart-app"}) || on.LastErrorCode != wire.StatusHookFailed {
		t.Fatalf("after %d failing runs: ran %d, failed %q, error %q", rounds, len(runs()), on.HooksFailed, on.LastErrorCode)
	}
	// Every path changed (640 written, 600 of them removed since: 160 KiB) was
	// owed. Cut once past 128 KiB to the 64 KiB one hook's MESH_CHANGED carries,
	// and one more path, then grown again by what each round changes.
	size := pathsSize(on.HooksPending)
	if size > maxOwedBytes || size < 64<<10 || !on.HooksCut {
		t.Fatalf("%d paths owed, %d bytes, cut %v: want them cut to between 64 and 128 KiB, and the cut on record, not all %d changed", len(on.HooksPending), size, on.HooksCut, rounds*each)
	}

	// Fixed, its hooks file narrowed to the last round's paths (10 KiB of those
	// owed, which MESH_CHANGED carries whole), and run again by a restart: told
	// some paths were left out all the same; then nothing is owed and the cut is
	// over.
	if err := os.WriteFile(fixed, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg = load(fmt.Sprintf("etc/*-%02d-*", rounds-1))
	a = f.withHooks(t, cfg)
	a.runOwedHooks()
	on, err = state.Load(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	if r := runs(); len(r) != rounds+1 || r[rounds] == "omitted=0" || on.HooksCut || len(on.HooksPending) != 0 || on.LastErrorCode != "" {
		t.Fatalf("the run after the fix saw %v; on record cut %v, owed %d, error %q", r[rounds:], on.HooksCut, len(on.HooksPending), on.LastErrorCode)
	}
	// The next change is a change like any other.
	if err := a.handle(context.Background(), f.declFiles(t, rounds+1, fmt.Sprintf("etc/new-%02d-0", rounds-1))); err != nil {
		t.Fatal(err)
	}
	if r := runs(); len(r) != rounds+2 || r[rounds+1] != "omitted=0" {
		t.Fatalf("a run after the cut was over saw %v, want omitted=0", r[rounds+1:])
	}
}

// TestABatchQueuedBeforeACutIsToldOfIt (review 28d): a batch waiting while the one
// before failed and the paths owed were cut ran without the cut's flag, and its
// success cleared the failure of paths it never listed. It is handed over with it.
func TestABatchQueuedBeforeACutIsToldOfIt(t *testing.T) {
	f := newFixture(t)
	cfg, _, _ := failingUntilFixed(t)
	a := f.withHooks(t, cfg)
	a.hookJobs = make(chan hookRun, 1) // as Run makes it
	ctx := context.Background()
	long := strings.Repeat("x", 240)
	var paths []string
	for i := range 540 { // 140 KiB: past maxOwedBytes
		paths = append(paths, fmt.Sprintf("etc/%s-%03d", long, i))
	}
	if err := a.handle(ctx, f.declFiles(t, 1, paths...)); err != nil {
		t.Fatal(err)
	}
	first := <-a.hookJobs
	if err := a.handle(ctx, f.declFiles(t, 2, append(paths, "etc/new")...)); err != nil {
		t.Fatal(err)
	}
	first.run(ctx, a.o.Hooks, a.o.Root) // fails: not fixed
	a.hooksFinished(first)
	if !a.applied.HooksCut {
		t.Fatalf("%d paths failed (%d bytes) and the cut is not on record", len(paths), pathsSize(paths))
	}
	if second := <-a.hookJobs; !second.cut {
		t.Fatal("the batch queued before the cut was handed over without it")
	}
}

// TestRetryReadsTheHooksFileAgain (a walkthrough): `meshhost hooks retry` after the
// hook's command was mended in the hooks file ran the command as read when the
// agent started, and said it failed again. The retry reads the file again: mended,
// the hook runs as mended; a file that cannot be used now runs nothing and says
// why, the hooks read before kept.
func TestRetryReadsTheHooksFileAgain(t *testing.T) {
	dir, err := os.MkdirTemp("", "mh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	f := newFixtureIn(t, dir)
	p := filepath.Join(t.TempDir(), "hooks.json")
	write := func(run string) {
		t.Helper()
		js, _ := json.Marshal(map[string]any{"hooks": []any{map[string]any{"name": "restart-app", "paths": []string{"etc/*"}, "run": []string{"sh", "-c", run}}}})
		if err := os.WriteFile(p, js, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`echo "a typo in the hook's own command" >&2; exit 1`)
	cfg, err := hooks.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	a := f.withHooks(t, cfg)
	a.o.HooksFile = p
	if err := a.handle(context.Background(), f.decl(t, 1, "x")); err != nil {
		t.Fatal(err)
	}
	answerRetries(t, a, dir)
	if out, err := RetryHooks(dir, 10*time.Second); err != nil || len(out.Failed) != 1 || !strings.Contains(out.Error, "a typo") {
		t.Fatalf("retry before the file is mended: %+v, %v", out, err)
	}
	if err := os.WriteFile(p, []byte(`{"hooks":[`), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := RetryHooks(dir, 10*time.Second); err != nil || out.ConfigError == "" || len(out.Ran) != 0 {
		t.Fatalf("retry with the file cut short: %+v, %v; want nothing run, the file's fault said", out, err)
	}
	write(`true`)
	if out, err := RetryHooks(dir, 10*time.Second); err != nil || len(out.Failed) != 0 || !slices.Equal(out.Ran, []string{"restart-app"}) {
		t.Fatalf("retry once the file is mended: %+v, %v; want the mended hook run", out, err)
	}
}

// answerRetries serves a's socket in dir and answers `meshhost hooks retry` as the
// agent's loop does, until the test ends.
func answerRetries(t *testing.T, a *Agent, dir string) {
	t.Helper()
	ln, err := listenSocket(SocketPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.serveSocket(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	// The loop's part: take requests and answer them.
	go func() {
		for {
			select {
			case r := <-a.hookRetries:
				a.retryHooks(r)
			case <-ctx.Done():
				return
			}
		}
	}()
}

// TestHooksThatFailTogetherAreReportedOnOneLine (a walkthrough): two hooks failing
// in one run were reported as one error of two lines, which what shows a node's
// error on one line glued into "exit status 3 hook b: …". They are named first,
// quoted, then each said on the same line; the names lead, so that a report cut
// within the first hook's long output still names the second (a review).
func TestHooksThatFailTogetherAreReportedOnOneLine(t *testing.T) {
	for name, c := range map[string]struct{ first, want string }{
		"short": {"exit 3", `hooks "first", "second" failed: hook first: exit status 3; hook second: exit status 4`},
		"long":  {"head -c 900 /dev/zero | tr '\\0' x; exit 3", `hooks "first", "second" failed: hook first: exit status 3: xxx`},
	} {
		f := newFixture(t)
		cfg := loadHooks(t, map[string]any{"hooks": []any{
			map[string]any{"name": "first", "paths": []string{"etc/*"}, "run": []string{"sh", "-c", c.first}},
			map[string]any{"name": "second", "paths": []string{"etc/*"}, "run": []string{"sh", "-c", "exit 4"}},
		}})
		a := f.withHooks(t, cfg)
		if err := a.handle(context.Background(), f.decl(t, 1, "x")); err != nil {
			t.Fatal(err)
		}
		st := reported(t, a)
		if st.Error == nil || st.Error.Code != wire.StatusHookFailed || !strings.HasPrefix(st.Error.Message, c.want) || strings.Contains(st.Error.Message, "\n") {
			t.Fatalf("%s: reported %+v, want it to begin %q", name, st.Error, c.want)
		}
	}
}

// TestManyHooksFailingTogetherLeaveTheirReasons (a review): a dozen hooks of long
// names failing in one run filled the report's 512 bytes with their names, and
// no reason was left. The head names what fits in 160 bytes and counts the rest.
func TestManyHooksFailingTogetherLeaveTheirReasons(t *testing.T) {
	f := newFixture(t)
	var list []any
	for i := range 12 {
		list = append(list, map[string]any{"name": fmt.Sprintf("restart-the-application-service-number-%02d", i), "paths": []string{"etc/*"}, "run": []string{"sh", "-c", "exit 3"}})
	}
	a := f.withHooks(t, loadHooks(t, map[string]any{"hooks": list}))
	if err := a.handle(context.Background(), f.decl(t, 1, "x")); err != nil {
		t.Fatal(err)
	}
	st := reported(t, a)
	if st.Error == nil || !strings.HasPrefix(st.Error.Message, `hooks "restart-the-application-service-number-00", "restart-the-application-service-number-01", "restart-the-application-service-number-02" (and 9 more) failed: hook restart-the-application-service-number-00: exit status 3`) {
		t.Fatalf("reported %+v", st.Error)
	}
}
