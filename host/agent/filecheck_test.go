package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/declarations"
	"mesh/host/apply"
	"mesh/host/hooks"
	"mesh/host/state"
	"mesh/host/wire"
)

// handEdit changes the fixture's managed file as a person on the host would.
func (f *fixture) handEdit(t *testing.T, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(f.root, "etc", "app.conf"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) putBackCount() uint64 {
	f.a.stats.mu.Lock()
	defer f.a.stats.mu.Unlock()
	return f.a.stats.putBack
}

// TestTheFileCheckPutsBackFilesChangedByHand: the check finds a managed file changed
// on the host and writes the declared content back, counted; a root as declared is
// left alone. Before, it stayed changed, the node converged, until the mesh's
// re-signed copy up to 12 hours later.
func TestTheFileCheckPutsBackFilesChangedByHand(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.a.handle(ctx, f.decl(t, 1, "declared")); err != nil {
		t.Fatal(err)
	}
	if out := f.a.checkFiles(ctx); out.putBack || out.report || f.putBackCount() != 0 {
		t.Fatalf("a root as declared: the check reported a change (%d put back)", f.putBackCount())
	}
	f.handEdit(t, "edited by hand")
	if out := f.a.checkFiles(ctx); !out.putBack || !out.report {
		t.Fatal("the check did not report the file it put back")
	}
	if got := f.file(t); got != "declared" {
		t.Fatalf("after the check the file holds %q", got)
	}
	if n := f.putBackCount(); n != 1 {
		t.Fatalf("%d files counted put back, want 1", n)
	}
	if got := f.a.Applied(); got.Version != 1 || got.LastErrorCode != "" {
		t.Fatalf("after the check: %+v", got)
	}
	if err := os.Remove(filepath.Join(f.root, "etc", "app.conf")); err != nil {
		t.Fatal(err)
	}
	if !f.a.checkFiles(ctx).putBack || f.file(t) != "declared" {
		t.Fatalf("a removed file is not put back: %q", f.file(t))
	}
}

// TestTheFileCheckWorksAfterARestart: the copy of the applied declaration the check
// uses is kept in the state directory, owner-only, and a restarted agent checks
// from it before the mesh sends anything.
func TestTheFileCheckWorksAfterARestart(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.a.handle(ctx, f.decl(t, 1, "declared")); err != nil {
		t.Fatal(err)
	}
	kept := filepath.Join(f.dir, KeptFileName)
	if _, err := os.Stat(kept); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the copy was written on the declaration's path (%v): it is the check's to write", err)
	}
	f.a.checkFiles(ctx)
	fi, err := os.Stat(kept)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s has mode %v, want 0600", KeptFileName, fi.Mode().Perm())
	}
	f.a.kp.Wipe()
	a, err := New(Options{StateDir: f.dir, Root: f.root, Now: func() time.Time { return t0 }, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	f.handEdit(t, "edited while the agent was stopped")
	if !a.checkFiles(ctx).putBack || f.file(t) != "declared" {
		t.Fatalf("the restarted agent's check: file %q", f.file(t))
	}
}

// TestTheFileCheckUsesOnlyAVerifiedCopy: a kept copy that no longer verifies
// (expired, or of an older version than the state says is applied) is not
// applied, the file left as it is, and no failure reported: the mesh's next copy
// restarts the checks. An expired one is kept (TestAnExpiredCopyIsKept); the
// others are removed.
func TestTheFileCheckUsesOnlyAVerifiedCopy(t *testing.T) {
	t.Run("expired", func(t *testing.T) {
		f := newFixture(t)
		ctx := context.Background()
		if err := f.a.handle(ctx, f.decl(t, 1, "declared")); err != nil {
			t.Fatal(err)
		}
		f.a.checkFiles(ctx) // keeps the copy on disk
		f.a.o.Now = func() time.Time { return t0.Add(25 * time.Hour) }
		f.handEdit(t, "edited by hand")
		if out := f.a.checkFiles(ctx); out.putBack || !out.ask || !f.a.askApplied || f.file(t) != "edited by hand" {
			t.Fatalf("an expired copy was applied: %q", f.file(t))
		}
		if got := f.a.Applied(); got.LastErrorCode != "" {
			t.Fatalf("an expired kept copy reported a failure: %+v", got)
		}
	})
	t.Run("older than the applied version", func(t *testing.T) {
		f := newFixture(t)
		ctx := context.Background()
		if err := f.a.handle(ctx, f.decl(t, 1, "one")); err != nil {
			t.Fatal(err)
		}
		f.a.checkFiles(ctx) // keeps v1 on disk
		if err := f.a.handle(ctx, f.decl(t, 2, "two")); err != nil {
			t.Fatal(err)
		}
		f.a.kp.Wipe() // stopped before a check kept v2
		a, err := New(Options{StateDir: f.dir, Root: f.root, Now: func() time.Time { return t0 }, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		f.handEdit(t, "edited by hand")
		if out := a.checkFiles(ctx); out.putBack || !out.ask || f.file(t) != "edited by hand" {
			t.Fatalf("the copy of v1 was applied over v2: %q", f.file(t))
		}
		if got := a.Applied(); got.Version != 2 || got.LastErrorCode != "" {
			t.Fatalf("after the check: %+v", got)
		}
	})
	t.Run("garbage", func(t *testing.T) {
		f := newFixture(t)
		ctx := context.Background()
		if err := f.a.handle(ctx, f.decl(t, 1, "declared")); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(f.dir, KeptFileName), []byte(`{"payload":`), 0o600); err != nil {
			t.Fatal(err)
		}
		f.a.kp.Wipe()
		a, err := New(Options{StateDir: f.dir, Root: f.root, Now: func() time.Time { return t0 }, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		f.handEdit(t, "edited by hand")
		if out := a.checkFiles(ctx); out.putBack || !out.ask || f.file(t) != "edited by hand" || a.Applied().LastErrorCode != "" {
			t.Fatalf("a damaged copy: file %q, %+v", f.file(t), a.Applied())
		}
	})
}

// TestAnExpiredCopyIsKept: cut off from the mesh for longer than the validity,
// the kept copy expires. It stays on disk (a clock ahead set right, or a restart
// after it, makes it good again), the mesh is asked once, not at every check, and
// meshhost status and the metric say the check is off, why and since when, not an
// old "checked at … none changed". A restart with the clock right checks from it.
// Before (an audit), the copy was removed, the checks stopped for the rest of the
// outage, and the status kept its last "checked at".
func TestAnExpiredCopyIsKept(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.a.handle(ctx, f.decl(t, 1, "declared")); err != nil {
		t.Fatal(err)
	}
	f.a.checkFiles(ctx) // keeps the copy on disk
	var logged strings.Builder
	f.a.log = slog.New(slog.NewTextHandler(&logged, nil))
	cutOff := t0.Add(25 * time.Hour)
	f.a.o.Now = func() time.Time { return cutOff }
	// The root as declared still: the expired copy is not trusted to say so.
	if out := f.a.checkFiles(ctx); !out.ask || !f.a.askApplied {
		t.Fatalf("the check under an expired copy: %+v, asking %v", out, f.a.askApplied)
	}
	f.handEdit(t, "edited by hand")
	for range 2 {
		if out := f.a.checkFiles(ctx); out.putBack || out.ask || f.file(t) != "edited by hand" {
			t.Fatalf("a later check under the expired copy: %+v, file %q", out, f.file(t))
		}
	}
	if n := strings.Count(logged.String(), "files changed on this host are not put back"); n != 1 {
		t.Errorf("%d lines saying the check is off, want 1:\n%s", n, logged.String())
	}
	if _, err := os.Stat(filepath.Join(f.dir, KeptFileName)); err != nil {
		t.Fatalf("the expired copy is not kept: %v", err)
	}
	st := f.a.linkStatus()
	if st.Files == nil || st.Files.OffCode != CheckOffExpired || !st.Files.OffSince.Equal(cutOff) || !strings.Contains(st.Files.Off, "expired") || !st.Files.CheckedAt.Equal(t0) {
		t.Fatalf("meshhost status while the copy is expired: %+v", st.Files)
	}
	if off := metricValue(t, f.a, "mesh_agent_file_check_off"); off != 1 {
		t.Errorf("mesh_agent_file_check_off %v while the copy is expired, want 1", off)
	}

	// Restarted with the clock right (it ran a day ahead): checked from the copy.
	f.a.kp.Wipe()
	a, err := New(Options{StateDir: f.dir, Root: f.root, Now: func() time.Time { return t0.Add(time.Hour) }, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if out := a.checkFiles(ctx); !out.putBack || f.file(t) != "declared" {
		t.Fatalf("restarted with the clock right: %+v, file %q", out, f.file(t))
	}
	if st := a.linkStatus(); st.Files == nil || st.Files.OffCode != "" {
		t.Fatalf("meshhost status once the copy is valid: %+v", st.Files)
	}
	if off := metricValue(t, a, "mesh_agent_file_check_off"); off != 0 {
		t.Errorf("mesh_agent_file_check_off %v once the copy is valid, want 0", off)
	}
}

// TestTheFileCheckIsOnOnceAFreshCopyArrives: off (expired), the copy the mesh
// sends for the ask turns it on again at once.
func TestTheFileCheckIsOnOnceAFreshCopyArrives(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.a.handle(ctx, f.decl(t, 1, "declared")); err != nil {
		t.Fatal(err)
	}
	f.a.checkFiles(ctx)
	now := t0.Add(25 * time.Hour)
	f.a.o.Now = func() time.Time { return now }
	f.a.checkFiles(ctx)
	if st := f.a.linkStatus(); st.Files == nil || st.Files.OffCode != CheckOffExpired {
		t.Fatalf("setup: %+v", st.Files)
	}
	content := "declared"
	fresh, err := declarations.SignDeclaration(declarations.Declaration{
		Mesh: "m", Node: "n-1", NodeKey: f.nodeKey, Version: 1, IssuedAt: now, ExpiresAt: now.Add(24 * time.Hour),
		Body: declarations.Body{Files: []declarations.File{{Path: "etc/app.conf", Content: &content}}},
	}, f.key)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.a.handle(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	if st := f.a.linkStatus(); st.Files.OffCode != "" || f.a.askApplied {
		t.Fatalf("a fresh copy arrived: %+v, asking %v", st.Files, f.a.askApplied)
	}
	f.handEdit(t, "edited by hand")
	if !f.a.checkFiles(ctx).putBack || f.file(t) != "declared" {
		t.Fatalf("from the fresh copy: %q", f.file(t))
	}
}

// TestTheFileCheckIsOnOnceTheClockIsRight: off under a clock a day ahead, the check
// puts back from the same copy once the clock is set right, and says it is on.
func TestTheFileCheckIsOnOnceTheClockIsRight(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.a.handle(ctx, f.decl(t, 1, "declared")); err != nil {
		t.Fatal(err)
	}
	f.a.checkFiles(ctx)
	f.a.o.Now = func() time.Time { return t0.Add(25 * time.Hour) }
	f.handEdit(t, "edited by hand")
	f.a.checkFiles(ctx)
	if st := f.a.linkStatus(); st.Files == nil || st.Files.OffCode != CheckOffExpired {
		t.Fatalf("setup: %+v", st.Files)
	}
	f.a.o.Now = func() time.Time { return t0.Add(time.Hour) }
	if out := f.a.checkFiles(ctx); !out.putBack || f.file(t) != "declared" {
		t.Fatalf("the clock right again: %+v, file %q", out, f.file(t))
	}
	if st := f.a.linkStatus(); st.Files.OffCode != "" || !st.Files.CheckedAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("meshhost status with the clock right again: %+v", st.Files)
	}
}

// TestTheFileCheckSaysItHasNoCopy: an agent restarted without a kept copy (cut off
// from the mesh, or its copy removed as damaged) says its check is off, asking.
func TestTheFileCheckSaysItHasNoCopy(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.a.handle(ctx, f.decl(t, 1, "declared")); err != nil {
		t.Fatal(err)
	}
	f.a.kp.Wipe() // stopped before a check kept the copy
	a, err := New(Options{StateDir: f.dir, Root: f.root, Now: func() time.Time { return t0 }, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	a.askApplied = a.noKeptCopy() // as Run does
	if out := a.checkFiles(ctx); out.ask || !a.askApplied {
		t.Fatalf("no copy kept: %+v (the start asked already), asking %v", out, a.askApplied)
	}
	if st := a.linkStatus(); st.Files == nil || st.Files.OffCode != CheckOffNoCopy || !st.Files.CheckedAt.IsZero() {
		t.Fatalf("meshhost status with no copy kept: %+v", st.Files)
	}
}

// TestACopyNotKeptIsSaidOnce: a copy of the applied declaration that cannot be
// written to the state directory (a full disk there; here a directory in its
// place) is warned of once, not at every check, with meshhost status saying so
// meanwhile; once written, the agent says so and the status clears. Before (an
// audit), the warning came at every check (1,440 lines a day) and nothing else
// showed it.
func TestACopyNotKeptIsSaidOnce(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.a.handle(ctx, f.decl(t, 1, "declared")); err != nil {
		t.Fatal(err)
	}
	kept := filepath.Join(f.dir, KeptFileName)
	if err := os.Mkdir(kept, 0o700); err != nil {
		t.Fatal(err)
	}
	var logged strings.Builder
	f.a.log = slog.New(slog.NewTextHandler(&logged, nil))
	for range 3 {
		f.a.checkFiles(ctx)
	}
	if n := strings.Count(logged.String(), "could not keep a copy of the applied declaration"); n != 1 {
		t.Errorf("%d warnings in 3 checks, want 1:\n%s", n, logged.String())
	}
	if st := f.a.linkStatus(); st.Files == nil || st.Files.NotKept == "" {
		t.Fatalf("meshhost status does not say the copy is not kept: %+v", st.Files)
	}
	if err := os.Remove(kept); err != nil {
		t.Fatal(err)
	}
	f.a.checkFiles(ctx)
	if _, err := os.Stat(kept); err != nil {
		t.Fatalf("the copy not written once it can be: %v", err)
	}
	if !strings.Contains(logged.String(), "kept the copy of the applied declaration in the state directory again") {
		t.Errorf("the agent does not say the copy is kept again:\n%s", logged.String())
	}
	if st := f.a.linkStatus(); st.Files == nil || st.Files.NotKept != "" {
		t.Fatalf("meshhost status once the copy is kept: %+v", st.Files)
	}
}

// TestTheFileCheckReportsAFailureOnce: a put back that fails is the node's failure
// (apply_failed for the applied version), reported at the first check that finds
// it and not again at each later one; a check that finds the root as declared
// again ends it. Meanwhile meshhost status says why (not "none changed"), and the
// log says a put back failed, not that an envelope was refused.
func TestTheFileCheckReportsAFailureOnce(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.a.handle(ctx, f.decl(t, 1, "declared")); err != nil {
		t.Fatal(err)
	}
	var logged strings.Builder
	f.a.log = slog.New(slog.NewTextHandler(&logged, nil))
	flaky := &flakyApplier{blocked: true, inner: f.a.applier}
	f.a.applier = flaky
	if !f.a.checkFiles(ctx).report {
		t.Fatal("the failure was not reported as a change")
	}
	if got := f.a.Applied(); got.LastErrorCode != wire.StatusApplyFailed || got.LastErrorVersion != 1 {
		t.Fatalf("after a failed put back: %+v", got)
	}
	if st := f.a.linkStatus(); st.Files == nil || st.Files.Failed == "" {
		t.Errorf("meshhost status is not told the put back failed: %+v", st.Files)
	}
	if out := logged.String(); !strings.Contains(out, "could not be put back as declared") || strings.Contains(out, "envelope not applied") {
		t.Errorf("the failed put back is logged as:\n%s", out)
	}
	for range 3 {
		if f.a.checkFiles(ctx).report {
			t.Fatal("the same failure was reported again")
		}
	}
	f.a.stats.mu.Lock()
	n := f.a.stats.refused[wire.StatusApplyFailed]
	f.a.stats.mu.Unlock()
	if n != 1 {
		t.Fatalf("apply_failed counted %d times, want 1", n)
	}
	flaky.blocked = false
	if !f.a.checkFiles(ctx).report {
		t.Fatal("the end of the failure was not reported")
	}
	if got := f.a.Applied(); got.LastErrorCode != "" {
		t.Fatalf("the root is as declared and the failure stays: %+v", got)
	}
	if st := f.a.linkStatus(); st.Files == nil || st.Files.Failed != "" {
		t.Errorf("meshhost status still shows the put back failing: %+v", st.Files)
	}
	// A declaration applied also ends it, before the next check.
	flaky.blocked = true
	f.a.checkFiles(ctx)
	flaky.blocked = false
	if err := f.a.handle(ctx, f.decl(t, 2, "declared again")); err != nil {
		t.Fatal(err)
	}
	if st := f.a.linkStatus(); st.Files == nil || st.Files.Failed != "" {
		t.Errorf("after a declaration applied, meshhost status still shows the put back failing: %+v", st.Files)
	}
}

// TestTheFileCheckLeavesTheRootToAFailingDeclaration: while a newer declaration
// fails to apply and is retried, the check does not write the older one's files.
func TestTheFileCheckLeavesTheRootToAFailingDeclaration(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.a.handle(ctx, f.decl(t, 1, "one")); err != nil {
		t.Fatal(err)
	}
	flaky := &flakyApplier{blocked: true, inner: f.a.applier}
	f.a.applier = flaky
	if err := f.a.handle(ctx, f.decl(t, 2, "two")); err != nil {
		t.Fatal(err)
	}
	if f.a.retry.raw == nil {
		t.Fatal("no retry of v2")
	}
	flaky.blocked = false
	f.handEdit(t, "mended by hand for v2")
	if f.a.checkFiles(ctx).putBack || f.file(t) != "mended by hand for v2" {
		t.Fatalf("the check wrote v1 while v2 is retried: %q", f.file(t))
	}
}

// failOnContent fails to write a file holding content (made immutable, say), and
// writes any other.
type failOnContent struct {
	content string
	inner   apply.Applier
}

func (f *failOnContent) Apply(ctx context.Context, files []apply.File, managed []string) (apply.Result, error) {
	for _, x := range files {
		if string(x.Data) == f.content {
			return apply.Result{}, &apply.ApplyError{Path: x.Path, Err: errors.New("operation not permitted"), RolledBack: true}
		}
	}
	return f.inner.Apply(ctx, files, managed)
}

// TestACopyOfTheAppliedLeavesTheRootToAFailingDeclaration: while a newer
// declaration fails to apply (its retry pending, or after a restart its recorded
// failure), a valid copy of the applied one arriving (the leader's re-signed copy
// published out of order with the newer declaration, or a broker replaying one)
// moves the applied validity and is kept, but does not write the older files over
// what an operator mended for the newer one: the rule the file check follows.
// Before (an audit), it put them back, hooks included, while the node went on
// reporting the newer one's failure.
func TestACopyOfTheAppliedLeavesTheRootToAFailingDeclaration(t *testing.T) {
	for _, restarted := range []bool{false, true} {
		t.Run(fmt.Sprintf("restarted=%v", restarted), func(t *testing.T) {
			f := newFixture(t)
			ctx := context.Background()
			now := t0
			clock := func() time.Time { return now }
			f.a.o.Now = clock
			if err := f.a.handle(ctx, f.decl(t, 1, "one")); err != nil {
				t.Fatal(err)
			}
			f.a.applier = &failOnContent{content: "two", inner: f.a.applier}
			if err := f.a.handle(ctx, f.decl(t, 2, "two")); err != nil {
				t.Fatal(err)
			}
			a := f.a
			if restarted {
				f.a.kp.Wipe()
				var err error
				if a, err = New(Options{StateDir: f.dir, Root: f.root, Now: clock, Logger: slog.New(slog.DiscardHandler)}); err != nil {
					t.Fatal(err)
				}
			}
			if a.retry.raw == nil && !restarted || a.applied.LastErrorCode != wire.StatusApplyFailed || a.applied.LastErrorVersion != 2 {
				t.Fatalf("setup: retry pending %v, reporting %q v%d", a.retry.raw != nil, a.applied.LastErrorCode, a.applied.LastErrorVersion)
			}
			f.handEdit(t, "mended by hand for v2")
			now = t0.Add(12 * time.Hour)
			content := "one"
			refresh, err := declarations.SignDeclaration(declarations.Declaration{
				Mesh: "m", Node: "n-1", NodeKey: f.nodeKey, Version: 1, IssuedAt: now, ExpiresAt: now.Add(24 * time.Hour),
				Body: declarations.Body{Files: []declarations.File{{Path: "etc/app.conf", Content: &content}}},
			}, f.key)
			if err != nil {
				t.Fatal(err)
			}
			if err := a.handle(ctx, refresh); err != nil {
				t.Fatal(err)
			}
			if got := f.file(t); got != "mended by hand for v2" {
				t.Fatalf("a copy of v1 wrote %q over the root while v2 fails", got)
			}
			if a.applied.LastErrorCode != wire.StatusApplyFailed || a.applied.LastErrorVersion != 2 {
				t.Fatalf("after the copy: reporting %q v%d", a.applied.LastErrorCode, a.applied.LastErrorVersion)
			}
			if !a.applied.ExpiresAt.Equal(now.Add(24*time.Hour)) || !bytes.Equal(a.kept, refresh) {
				t.Fatalf("the copy's validity not taken (expires %v) or not kept (%v)", a.applied.ExpiresAt, bytes.Equal(a.kept, refresh))
			}
		})
	}
}

// TestTheRunningAgentChecksItsFiles: the agent's loop runs the check on its own,
// with the mesh out of reach, and can be told never to.
func TestTheRunningAgentChecksItsFiles(t *testing.T) {
	if c := newCheckTimer(-1); c.C() != nil {
		t.Fatal("a negative interval still checks")
	}
	f := newFixture(t)
	if err := f.a.handle(context.Background(), f.decl(t, 1, "declared")); err != nil {
		t.Fatal(err)
	}
	f.a.o.CheckFiles = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.a.Run(ctx) }() // its broker (127.0.0.1:1) refuses
	f.handEdit(t, "edited by hand")
	deadline := time.Now().Add(10 * time.Second)
	for f.file(t) != "declared" {
		if time.Now().After(deadline) {
			t.Fatalf("not put back within 10 s of checks every 20 ms: %q", f.file(t))
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// tempNameApplier fails as a full disk does: the message names a new temporary file
// each time, the path stays the same.
type tempNameApplier struct{ n int }

func (a *tempNameApplier) Apply(context.Context, []apply.File, []string) (apply.Result, error) {
	a.n++
	return apply.Result{}, &apply.ApplyError{Path: "etc/app.conf", Err: fmt.Errorf("write etc/.meshhost-%08x: no space left on device", a.n), RolledBack: true}
}

// TestTheFileCheckReportsAFullDiskOnce: a put back failing for want of space names
// a random temporary file each time; it is still one failure, reported once (a
// review found it reported, saved and logged at every check).
func TestTheFileCheckReportsAFullDiskOnce(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.a.handle(ctx, f.decl(t, 1, "declared")); err != nil {
		t.Fatal(err)
	}
	f.a.applier = &tempNameApplier{}
	for range 4 {
		f.a.checkFiles(ctx)
	}
	f.a.stats.mu.Lock()
	n := f.a.stats.refused[wire.StatusApplyFailed]
	f.a.stats.mu.Unlock()
	if n != 1 {
		t.Fatalf("apply_failed counted %d times in 4 checks, want 1", n)
	}
}

// TestAPutBackDoesNotHideAFailedHook: a failed put back takes the place of a failed
// hook in the node's report; once the files are as declared again, the hook's
// failure is the node's again, not "converged" with the hook failed (a review).
func TestAPutBackDoesNotHideAFailedHook(t *testing.T) {
	f := newFixture(t)
	cfg, _, _ := failingUntilFixed(t)
	a := f.withHooks(t, cfg)
	ctx := context.Background()
	if err := a.handle(ctx, f.decl(t, 1, "declared")); err != nil {
		t.Fatal(err)
	}
	if st := reported(t, a); st.Error == nil || st.Error.Code != wire.StatusHookFailed {
		t.Fatalf("setup: %+v", st.Error)
	}
	flaky := &flakyApplier{blocked: true, inner: a.applier}
	a.applier = flaky
	a.checkFiles(ctx)
	if st := reported(t, a); st.Error == nil || st.Error.Code != wire.StatusApplyFailed {
		t.Fatalf("after a failed put back: %+v", st.Error)
	}
	flaky.blocked = false
	a.checkFiles(ctx)
	if st := reported(t, a); st.Error == nil || st.Error.Code != wire.StatusHookFailed {
		t.Fatalf("the files as declared again, the hook still failed: the report says %+v", st.Error)
	}
}

// TestTheFileCheckAsksForAFreshCopy: a rotation moves the keyring past the epoch the
// kept copy was signed under, and the mesh does not sign declarations again for
// it: the copy is dropped and the mesh asked, at once, for the applied declaration
// (a review found the checks stopped for up to 12 hours). The copy the mesh sends
// is kept and checked from.
func TestTheFileCheckAsksForAFreshCopy(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.a.handle(ctx, f.decl(t, 1, "declared")); err != nil {
		t.Fatal(err)
	}
	f.a.checkFiles(ctx)
	kr, err := declarations.SignKeyring(declarations.Keyring{Mesh: "m", Epoch: 1, Keys: f.a.id.SigningKeys, IssuedAt: t0}, f.key)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.a.handle(ctx, kr); err != nil || f.a.keyring.Epoch != 1 {
		t.Fatalf("keyring: %v", err)
	}
	f.handEdit(t, "edited by hand")
	if out := f.a.checkFiles(ctx); !out.ask || !f.a.askApplied || f.a.kept != nil {
		t.Fatalf("a copy older than the keyring: %+v, asking %t", out, f.a.askApplied)
	}
	// What the mesh answers: the applied declaration, signed under the keyring.
	content := "declared"
	fresh, err := declarations.SignDeclaration(declarations.Declaration{
		Mesh: "m", Node: "n-1", NodeKey: f.nodeKey, Version: 1, KeyringEpoch: 1, IssuedAt: t0, ExpiresAt: t0.Add(24 * time.Hour),
		Body: declarations.Body{Files: []declarations.File{{Path: "etc/app.conf", Content: &content}}},
	}, f.key)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.a.handle(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	f.handEdit(t, "edited again")
	if !f.a.checkFiles(ctx).putBack || f.file(t) != "declared" {
		t.Fatalf("from the fresh copy: %q", f.file(t))
	}
}

// TestTheFileCheckPutsBackUnderAClockBehind: with this machine's clock a day behind
// the applied copy's issue time (a VM restored from a snapshot, an RTC behind at
// boot), the check still puts back a file edited by hand from that copy, and says
// once that the clock is behind; a new declaration is still refused (not_yet_valid)
// until the clock is right, then applied. Before (an audit), the check stopped
// without a word, and the node showed converged.
func TestTheFileCheckPutsBackUnderAClockBehind(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.a.handle(ctx, f.decl(t, 1, "declared")); err != nil {
		t.Fatal(err)
	}
	var logged strings.Builder
	f.a.log = slog.New(slog.NewTextHandler(&logged, nil))
	f.a.o.Now = func() time.Time { return t0.Add(-24 * time.Hour) }
	for _, edit := range []string{"edited by hand", "edited again"} {
		f.handEdit(t, edit)
		if out := f.a.checkFiles(ctx); !out.putBack || out.ask || f.file(t) != "declared" {
			t.Fatalf("under a clock a day behind: %+v, file %q", out, f.file(t))
		}
	}
	if n := strings.Count(logged.String(), "clock is behind the applied declaration"); n != 1 {
		t.Errorf("%d lines saying the clock is behind, want 1:\n%s", n, logged.String())
	}
	if err := f.a.handle(ctx, f.decl(t, 2, "two")); err != nil {
		t.Fatal(err)
	}
	if got := f.a.Applied(); got.Version != 1 || got.LastErrorCode != "not_yet_valid" || f.file(t) != "declared" {
		t.Fatalf("a new declaration under the clock behind: %+v, file %q", got, f.file(t))
	}
	f.a.o.Now = func() time.Time { return t0.Add(time.Minute) }
	if err := f.a.handle(ctx, f.decl(t, 2, "two")); err != nil {
		t.Fatal(err)
	}
	if got := f.a.Applied(); got.Version != 2 || f.file(t) != "two" {
		t.Fatalf("with the clock right again: %+v, file %q", got, f.file(t))
	}
}

// TestAnOlderCopyIsNotKept: a broker replaying an older copy of the applied version
// (valid still) does not take the place of the fresher one, which would expire
// first and stop the checks early.
func TestAnOlderCopyIsNotKept(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	now := t0
	f.a.o.Now = func() time.Time { return now }
	first := f.declAt(t, t0)
	if err := f.a.handle(ctx, first); err != nil {
		t.Fatal(err)
	}
	now = t0.Add(12 * time.Hour)
	refresh := f.declAt(t, now)
	if err := f.a.handle(ctx, refresh); err != nil {
		t.Fatal(err)
	}
	now = t0.Add(13 * time.Hour)
	if err := f.a.handle(ctx, first); err != nil { // replayed
		t.Fatal(err)
	}
	if !bytes.Equal(f.a.kept, refresh) {
		t.Fatal("the replayed older copy took the place of the refresh")
	}
}

// TestAFailingDeclarationOwnsTheRootAfterARestart: the retry of a newer declaration
// that fails is not kept across a restart, but its recorded failure is: the check
// of the restarted agent does not write the older version over what an operator
// mended for the newer one (a review).
func TestAFailingDeclarationOwnsTheRootAfterARestart(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.a.handle(ctx, f.decl(t, 1, "one")); err != nil {
		t.Fatal(err)
	}
	f.a.checkFiles(ctx) // keeps v1
	f.a.applier = &flakyApplier{blocked: true, inner: f.a.applier}
	if err := f.a.handle(ctx, f.decl(t, 2, "two")); err != nil {
		t.Fatal(err)
	}
	f.a.kp.Wipe()
	a, err := New(Options{StateDir: f.dir, Root: f.root, Now: func() time.Time { return t0 }, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	f.handEdit(t, "mended by hand for v2")
	if a.checkFiles(ctx).putBack || f.file(t) != "mended by hand for v2" {
		t.Fatalf("the restarted agent's check wrote v1 while v2 fails: %q", f.file(t))
	}
}

// partialApplier applies, then fails as an apply whose rollback failed too.
type partialApplier struct {
	inner apply.Applier
	fail  bool
}

func (p *partialApplier) Apply(ctx context.Context, files []apply.File, managed []string) (apply.Result, error) {
	res, err := p.inner.Apply(ctx, files, managed)
	if err != nil || !p.fail {
		return res, err
	}
	return apply.Result{}, &apply.ApplyError{Path: "etc/app.conf", Err: os.ErrPermission, RollbackErr: os.ErrPermission}
}

// countingHooks is a hooks file whose hook for pattern appends a line to a file
// at each run; runs counts them.
func countingHooks(t *testing.T, hooksJSON func(count string) string) (cfg hooks.Config, runs func(name string) int) {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, "hooks.json")
	if err := os.WriteFile(p, []byte(hooksJSON(dir)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := hooks.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, func(name string) int {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		return strings.Count(string(b), "run\n")
	}
}

// TestAPartialPutBackOwesItsHooks: a put back that wrote a file and then failed
// without rolling back owes that file's hook: the next check finds the file as
// declared and runs it (a review found it never ran, the node converged).
func TestAPartialPutBackOwesItsHooks(t *testing.T) {
	f := newFixture(t)
	cfg, runs := countingHooks(t, func(dir string) string {
		return `{"hooks":[{"name":"reload","paths":["etc/*"],"run":["sh","-c","echo run >> ` + dir + `/reload"]}]}`
	})
	a := f.withHooks(t, cfg)
	ctx := context.Background()
	if err := a.handle(ctx, f.decl(t, 1, "declared")); err != nil {
		t.Fatal(err)
	}
	f.handEdit(t, "edited by hand")
	pa := &partialApplier{inner: a.applier, fail: true}
	a.applier = pa
	a.checkFiles(ctx)
	pa.fail = false
	a.checkFiles(ctx)
	if n := runs("reload"); n != 2 {
		t.Fatalf("the hook ran %d times, want 2: the declaration's and the one a half put back owed", n)
	}
}

// TestAFileCheckDoesNotRetryFailedHooks: a put back runs the hooks of the files it
// wrote, not the hooks that failed before for other paths, which run again only
// when someone acts (a file something keeps rewriting ran a failed restart at every
// check: a review).
func TestAFileCheckDoesNotRetryFailedHooks(t *testing.T) {
	f := newFixture(t)
	cfg, runs := countingHooks(t, func(dir string) string {
		return `{"hooks":[{"name":"broken","paths":["etc/*"],"run":["sh","-c","echo run >> ` + dir + `/broken; exit 1"]},` +
			`{"name":"reload","paths":["srv/*"],"run":["sh","-c","echo run >> ` + dir + `/reload"]}]}`
	})
	a := f.withHooks(t, cfg)
	ctx := context.Background()
	if err := a.handle(ctx, f.declFiles(t, 1, "etc/a.conf", "srv/b.conf")); err != nil {
		t.Fatal(err)
	}
	if runs("broken") != 1 || runs("reload") != 1 || len(a.hookFailed) == 0 {
		t.Fatalf("setup: broken %d, reload %d, failed %v", runs("broken"), runs("reload"), a.hookFailed)
	}
	if err := os.WriteFile(filepath.Join(f.root, "srv", "b.conf"), []byte("edited by hand"), 0o644); err != nil {
		t.Fatal(err)
	}
	if !a.checkFiles(ctx).putBack {
		t.Fatal("srv/b.conf not put back")
	}
	if runs("reload") != 2 || runs("broken") != 1 {
		t.Fatalf("after the put back: reload ran %d times (want 2), broken %d (want 1)", runs("reload"), runs("broken"))
	}
	if st := reported(t, a); st.Error == nil || st.Error.Code != wire.StatusHookFailed {
		t.Fatalf("the broken hook's failure is gone: %+v", st.Error)
	}
}

// TestChecksThatKeepPuttingBackWaitLonger: while checks in a row put files back,
// each waits twice as long, up to an hour; a check that finds the files as declared
// brings the interval back.
func TestChecksThatKeepPuttingBackWaitLonger(t *testing.T) {
	c := newCheckTimer(time.Minute)
	defer c.stop()
	var waits []time.Duration
	for range 9 {
		c.next(true)
		waits = append(waits, c.wait)
	}
	want := []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute, 32 * time.Minute, time.Hour, time.Hour, time.Hour}
	if !slices.Equal(waits, want) {
		t.Fatalf("waits %v, want %v", waits, want)
	}
	c.next(false)
	if c.wait != time.Minute || c.streak != 0 {
		t.Fatalf("after a check that put nothing back: wait %s, streak %d", c.wait, c.streak)
	}
}

// countingApplier counts the applies of a FileApplier, and can tell, looking, what
// one would change.
type countingApplier struct {
	apply.FileApplier
	applies int
}

func (c *countingApplier) Apply(ctx context.Context, files []apply.File, previous []string) (apply.Result, error) {
	c.applies++
	return c.FileApplier.Apply(ctx, files, previous)
}

// TestACheckOfARootAsDeclaredOnlyLooks: at rest a check compares the files with the
// copy verified before and neither verifies the copy again nor applies it; only a
// difference does (a check is then a few reads, not a signature check and an apply a
// minute on every host).
func TestACheckOfARootAsDeclaredOnlyLooks(t *testing.T) {
	f := newFixture(t)
	ca := &countingApplier{FileApplier: apply.FileApplier{Root: f.root}}
	f.a.applier = ca
	ctx := context.Background()
	if err := f.a.handle(ctx, f.decl(t, 1, "declared")); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if out := f.a.checkFiles(ctx); out != (checkOutcome{}) {
			t.Fatalf("a root as declared: %+v", out)
		}
	}
	if ca.applies != 1 {
		t.Fatalf("%d applies for one declaration and three checks of a root as declared", ca.applies)
	}
	f.handEdit(t, "edited by hand")
	if !f.a.checkFiles(ctx).putBack || ca.applies != 2 || f.file(t) != "declared" {
		t.Fatalf("a changed file: %d applies, %q", ca.applies, f.file(t))
	}
}

// TestAPutBackThatRunsAFailedHookEndsItsFailure: a put back runs the hooks of the
// files it wrote; one of them that had failed and now succeeds (the operator fixed
// what it runs, then something changed its file) is no longer failing (a second
// review found the node reporting hook_failed still).
func TestAPutBackThatRunsAFailedHookEndsItsFailure(t *testing.T) {
	f := newFixture(t)
	cfg, fixed, runs := failingUntilFixed(t)
	a := f.withHooks(t, cfg)
	ctx := context.Background()
	if err := a.handle(ctx, f.decl(t, 1, "declared")); err != nil {
		t.Fatal(err)
	}
	if st := reported(t, a); st.Error == nil || st.Error.Code != wire.StatusHookFailed || runs() != 1 {
		t.Fatalf("setup: %+v, %d runs", st.Error, runs())
	}
	if err := os.WriteFile(fixed, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	f.handEdit(t, "edited by hand")
	if !a.checkFiles(ctx).putBack || runs() != 2 {
		t.Fatalf("put back, the hook ran %d times, want 2", runs())
	}
	if st := reported(t, a); st.Error != nil || len(a.applied.HooksFailed) != 0 || len(a.applied.HooksPending) != 0 {
		t.Fatalf("the hook succeeded and the node reports %+v (failed %v, pending %v)", st.Error, a.applied.HooksFailed, a.applied.HooksPending)
	}
}

// TestAnAskIsNotAnsweredByASyncThatDidNotAsk: the check asks for the applied
// declaration while a sync sent before (with the applied expiry) is in flight; that
// sync's success leaves the ask for the one that follows (a second review found it
// cleared, and the copy never sent).
func TestAnAskIsNotAnsweredByASyncThatDidNotAsk(t *testing.T) {
	f := newFixture(t)
	sy := &syncer{a: f.a, done: make(chan syncResult, 1)}
	sy.inFlight = true
	f.a.askApplied = true
	sy.start(context.Background(), nil)
	if !sy.again {
		t.Fatal("setup: the ask is not queued behind the sync in flight")
	}
	sy.finished(context.Background(), syncResult{resp: wire.SyncResponse{Sent: 0}})
	if sy.timer != nil {
		sy.timer.Stop()
	}
	if !f.a.askApplied {
		t.Fatal("a sync that did not ask cleared the ask")
	}
}

// errnoApplier fails at one path with the errno it holds.
type errnoApplier struct{ errno syscall.Errno }

func (e *errnoApplier) Apply(context.Context, []apply.File, []string) (apply.Result, error) {
	return apply.Result{}, &apply.ApplyError{Path: "etc/app.conf", Err: &fs.PathError{Op: "write", Path: "etc/.meshhost-x", Err: e.errno}, RolledBack: true}
}

// TestAnotherCauseAtThePathIsReported: the check reports a failure at a path once,
// and again when its cause changes (permission denied, then a full disk).
func TestAnotherCauseAtThePathIsReported(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.a.handle(ctx, f.decl(t, 1, "declared")); err != nil {
		t.Fatal(err)
	}
	ea := &errnoApplier{errno: syscall.EACCES}
	f.a.applier = ea
	f.a.checkFiles(ctx)
	f.a.checkFiles(ctx)
	ea.errno = syscall.ENOSPC
	if !f.a.checkFiles(ctx).report || !strings.Contains(f.a.applied.LastError, "no space") {
		t.Fatalf("a full disk after permission denied: %q", f.a.applied.LastError)
	}
	f.a.stats.mu.Lock()
	n := f.a.stats.refused[wire.StatusApplyFailed]
	f.a.stats.mu.Unlock()
	if n != 2 {
		t.Fatalf("apply_failed counted %d times, want 2 (one a cause)", n)
	}
}

// TestStatusSaysWhatTheCheckFound: meshhost status asks the running agent, which
// says when its check last compared the files and what it put back.
func TestStatusSaysWhatTheCheckFound(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.a.handle(ctx, f.decl(t, 1, "declared")); err != nil {
		t.Fatal(err)
	}
	if st := f.a.linkStatus(); st.Files != nil {
		t.Fatalf("before any check: %+v", st.Files)
	}
	f.a.checkFiles(ctx)
	st := f.a.linkStatus()
	if st.Files == nil || !st.Files.CheckedAt.Equal(t0) || st.Files.PutBack != 0 {
		t.Fatalf("after a check of a root as declared: %+v", st.Files)
	}
	f.handEdit(t, "edited by hand")
	f.a.checkFiles(ctx)
	st = f.a.linkStatus()
	if st.Files == nil || st.Files.PutBack != 1 || st.Files.LastPutBackCount != 1 || !slices.Equal(st.Files.LastPutBack, []string{"etc/app.conf"}) || !st.Files.LastPutBackAt.Equal(t0) {
		t.Fatalf("after a put back: %+v", st.Files)
	}
}

// TestACopyRefusedForItsValidityIsAskedForAgain: the clock steps 3 days ahead, then
// back (NTP). Under the clock ahead the kept copy is refused as expired and dropped,
// and the copy the mesh sends for the check's ask (the same: the mesh's clock is
// right, no re-sign due) is refused as expired too. The ask stays: once the clock is
// right, the heartbeat's sync asks again, the mesh's copy verifies, the node stops
// reporting "expired", and the checks go on from that copy. Before (an audit), the
// sync that delivered the refused copy ended the ask; the next one said the node
// held a copy as fresh as the mesh's, which then sent none: no file checked and
// "expired" reported with the clock right, until the re-sign up to 12 hours later.
func TestACopyRefusedForItsValidityIsAskedForAgain(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	now := t0
	f.a.o.Now = func() time.Time { return now }
	env := f.decl(t, 1, "declared") // the mesh's copy: issued t0, expires t0+24h
	if err := f.a.handle(ctx, env); err != nil {
		t.Fatal(err)
	}
	f.a.checkFiles(ctx) // kept, saved
	b := &fakeBroker{addr: "127.0.0.1:0", subject: f.a.id.Subjects.Sync}
	b.listen(t)
	nc, err := nats.Connect("nats://" + b.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	syncCtx, cancel := context.WithCancel(ctx)
	var workers sync.WaitGroup
	defer workers.Wait()
	defer cancel()
	sy := &syncer{a: f.a, nc: nc, done: make(chan syncResult, 1)}

	now = t0.Add(72 * time.Hour)
	f.a.noteStale()
	f.handEdit(t, "edited while the clock is ahead")
	if out := f.a.checkFiles(ctx); !out.ask || f.a.kept == nil {
		t.Fatalf("setup: the expired copy under the clock ahead: %+v, kept %v", out, f.a.kept != nil)
	}
	if !f.a.syncRequest().AppliedExpiresAt.IsZero() {
		t.Fatal("setup: the check's sync does not ask for the applied declaration")
	}
	// The sync the check asks for, as the loop makes it: sent, its one envelope
	// (the mesh's copy, refused as expired) handled, then acknowledged.
	sy.start(syncCtx, &workers)
	for deadline := time.Now().Add(5 * time.Second); b.published.Load() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("setup: the sync was not sent")
		}
	}
	f.a.received++
	if err := f.a.handle(ctx, env); err != nil {
		t.Fatal(err)
	}
	sy.finished(syncCtx, syncResult{resp: wire.SyncResponse{V: wire.ProtocolVersion, Sent: 1}})
	if !f.a.askApplied {
		t.Fatal("a copy refused as expired ended the ask")
	}

	now = t0.Add(2 * time.Hour) // the clock is right again
	if turned := f.a.noteStale(); !turned || !f.a.clockMayHelp() {
		t.Fatalf("the clock right again: turned %v, a sync %v", turned, f.a.clockMayHelp())
	}
	if req := f.a.syncRequest(); !req.AppliedExpiresAt.IsZero() {
		t.Fatalf("the sync says the node holds v%d valid until %v, as the mesh's copy is: the mesh sends nothing", req.AppliedVersion, req.AppliedExpiresAt)
	}
	if err := f.a.handle(ctx, env); err != nil { // what the mesh sends for it
		t.Fatal(err)
	}
	if st := reported(t, f.a); st.Error != nil || st.Stale {
		t.Fatalf("with the clock right and the copy verified, the node reports %+v (stale %v)", st.Error, st.Stale)
	}
	if f.a.askApplied || f.a.kept == nil || f.file(t) != "declared" {
		t.Fatalf("the copy verified: asking %v, kept %v, file %q", f.a.askApplied, f.a.kept != nil, f.file(t))
	}
	f.handEdit(t, "edited by hand")
	if !f.a.checkFiles(ctx).putBack || f.file(t) != "declared" {
		t.Fatalf("the check with the clock right: file %q", f.file(t))
	}
}

// TestACopyRefusedUnaskedIsAskedForOnceTheClockIsRight: a copy of the applied
// declaration that nobody asked for (a broker's replay of the one held, while the
// clock is days ahead, and another failure reported so that "expired" is not)
// makes the agent ask for one: once the clock is right, its sync says it holds no
// copy as fresh as the mesh's, so the mesh sends its own.
func TestACopyRefusedUnaskedIsAskedForOnceTheClockIsRight(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	now := t0
	f.a.o.Now = func() time.Time { return now }
	env := f.decl(t, 1, "declared")
	if err := f.a.handle(ctx, env); err != nil {
		t.Fatal(err)
	}
	f.a.failed(wire.StatusHookFailed, errors.New("hook restart-app: exit status 1"), 1)
	now = t0.Add(72 * time.Hour)
	f.a.noteStale()
	if err := f.a.handle(ctx, env); err != nil {
		t.Fatal(err)
	}
	if f.a.applied.LastErrorCode != wire.StatusHookFailed || !f.a.askApplied {
		t.Fatalf("a copy refused as expired: reporting %q, asking %v", f.a.applied.LastErrorCode, f.a.askApplied)
	}
	now = t0.Add(2 * time.Hour)
	if turned := f.a.noteStale(); !turned || !f.a.clockMayHelp() || !f.a.syncRequest().AppliedExpiresAt.IsZero() {
		t.Fatalf("the clock right again: turned %v, a sync %v asking %v", turned, f.a.clockMayHelp(), f.a.syncRequest().AppliedExpiresAt.IsZero())
	}
}

// crashProbe is the agent's applier, reading what the state file holds the moment
// Apply returns: what a kill -9 or a power cut right then leaves on disk.
type crashProbe struct {
	apply.FileApplier
	dir   string
	owed  [][]string
	fails bool
}

func (c *crashProbe) Apply(ctx context.Context, files []apply.File, previous []string) (apply.Result, error) {
	if c.fails {
		return apply.Result{}, &apply.ApplyError{Path: "etc/app.conf", Err: errors.New("disk on fire"), RolledBack: true}
	}
	res, err := c.FileApplier.Apply(ctx, files, previous)
	on, lerr := state.Load(c.dir)
	if lerr != nil {
		return res, lerr
	}
	c.owed = append(c.owed, on.HooksPending)
	return res, err
}

// TestAPutBackRecordsItsHooksBeforeItWrites: a file the check puts back has its
// hooks on record as owed before it is written, as a declaration's have: an agent
// killed as the write ends runs them at its next start. Once the put back is done,
// what is owed is what changed (the hook queued), and a put back that wrote nothing
// owes nothing more. Before, the put back wrote the file first and recorded its
// hooks after: killed in between, the restarted agent found the file as declared
// and nothing owed, and the service kept the hand-edited configuration.
func TestAPutBackRecordsItsHooksBeforeItWrites(t *testing.T) {
	f := newFixture(t)
	cfg, fixed, runs := failingUntilFixed(t)
	if err := os.WriteFile(fixed, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	a := f.withHooks(t, cfg)
	probe := &crashProbe{FileApplier: apply.FileApplier{Root: f.root}, dir: f.dir}
	a.applier = probe
	ctx := context.Background()
	if err := a.handle(ctx, f.decl(t, 1, "declared")); err != nil {
		t.Fatal(err)
	}
	f.handEdit(t, "edited by hand")
	a.checkFiles(ctx)
	if got := f.file(t); got != "declared" || runs() != 2 {
		t.Fatalf("not put back, or its hook not run: %q, %d runs", got, runs())
	}
	if last := probe.owed[len(probe.owed)-1]; !slices.Equal(last, []string{"etc/app.conf"}) {
		t.Fatalf("on disk as the put back's write ended: owed %q, want etc/app.conf (killed then, its hook never ran)", last)
	}
	if on, err := state.Load(f.dir); err != nil || len(on.HooksPending) != 0 {
		t.Fatalf("after the hook ran: owed on record %q (%v), want nothing", on.HooksPending, err)
	}
	// A put back that fails and changes nothing owes nothing.
	f.handEdit(t, "edited again")
	probe.fails = true
	a.checkFiles(ctx)
	if on, err := state.Load(f.dir); err != nil || len(on.HooksPending) != 0 || runs() != 2 {
		t.Fatalf("after a put back undone: owed on record %q (%v), %d runs; want nothing owed, no run", on.HooksPending, err, runs())
	}
}

// TestARootNewerThanTheStateIsNotPutBack (audit of the host's weeks, finding 2): a
// state directory restored from an older copy (or an apply cut off before its state
// was saved) names an older version than the root holds, and the check put the
// older files back, running their hooks, for as long as the mesh was out of reach.
// The root's mark names what it holds: a newer one keeps the check from putting
// anything back, says why, and asks the mesh once; a mark that is not newer does not.
func TestARootNewerThanTheStateIsNotPutBack(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.a.handle(ctx, f.decl(t, 1, "declared")); err != nil {
		t.Fatal(err)
	}
	applied := rootMarkValue{version: 1, digest: f.a.applied.BodyDigest}
	if m, ok := rootMark(f.root, f.a.euid); !ok || m != applied {
		t.Fatalf("the root's mark after v1: %+v (%t), want %+v", m, ok, applied)
	}
	// v2 was applied, then the state directory put back to v1's.
	if err := markRoot(f.root, f.a.euid, rootMarkValue{version: 2, digest: strings.Repeat("ab", 32)}); err != nil {
		t.Fatal(err)
	}
	f.handEdit(t, "v2's content")
	out := f.a.checkFiles(ctx)
	if out.putBack || !out.ask || f.file(t) != "v2's content" {
		t.Fatalf("a root newer than the state: put back %t, ask %t, file %q; want nothing put back and the mesh asked", out.putBack, out.ask, f.file(t))
	}
	if f.a.off.code != CheckOffRootNewer {
		t.Fatalf("the check is off for %q, want %q", f.a.off.code, CheckOffRootNewer)
	}
	if again := f.a.checkFiles(ctx); again.ask || again.putBack {
		t.Fatal("the mesh asked again at the next check")
	}
	// Another body of v1 (a state restored from another copy): not put back either.
	if err := markRoot(f.root, f.a.euid, rootMarkValue{version: 1, digest: strings.Repeat("ab", 32)}); err != nil {
		t.Fatal(err)
	}
	if out := f.a.checkFiles(ctx); out.putBack || f.file(t) != "v2's content" || f.a.off.code != CheckOffRootNewer {
		t.Fatalf("a root marked with another body of v1: put back %t, file %q, check off for %q", out.putBack, f.file(t), f.a.off.code)
	}
	// The mark not newer (removed on purpose, or v1's again): put back as before.
	if err := markRoot(f.root, f.a.euid, applied); err != nil {
		t.Fatal(err)
	}
	if !f.a.checkFiles(ctx).putBack || f.file(t) != "declared" || f.a.off.code != "" {
		t.Fatalf("with the root's mark at v1 the file is %q, the check off for %q; want put back", f.file(t), f.a.off.code)
	}
}

// declAt signs v1 of the fixture's body ("declared") issued at issued.
func (f *fixture) declAt(t *testing.T, issued time.Time) []byte {
	t.Helper()
	content := "declared"
	env, err := declarations.SignDeclaration(declarations.Declaration{
		Mesh: "m", Node: "n-1", NodeKey: f.nodeKey, Version: 1, IssuedAt: issued, ExpiresAt: issued.Add(24 * time.Hour),
		Body: declarations.Body{Files: []declarations.File{{Path: "etc/app.conf", Content: &content}}},
	}, f.key)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// TestNoFileCheckIsSaid: with --check-files 0 meshhost status showed no files line at
// all (a docs walkthrough), as before the first check: an operator who fixed a file
// by hand could not tell that it would stay.
func TestNoFileCheckIsSaid(t *testing.T) {
	f := newFixture(t)
	if st := f.a.linkStatus(); st.Files != nil {
		t.Fatalf("before the first check, with the check on: %+v", st.Files)
	}
	f.a.o.CheckFiles = -1
	if st := f.a.linkStatus(); st.Files == nil || !st.Files.Never {
		t.Fatalf("with --check-files 0: %+v, want never", st.Files)
	}
}
