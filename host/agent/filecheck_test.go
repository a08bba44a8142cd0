package agent

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

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
	if f.a.checkFiles(ctx) || f.putBackCount() != 0 {
		t.Fatalf("a root as declared: the check reported a change (%d put back)", f.putBackCount())
	}
	f.handEdit(t, "edited by hand")
	if !f.a.checkFiles(ctx) {
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
	if !f.a.checkFiles(ctx) || f.file(t) != "declared" {
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
	if !a.checkFiles(ctx) || f.file(t) != "declared" {
		t.Fatalf("the restarted agent's check: file %q", f.file(t))
	}
}

// TestTheFileCheckUsesOnlyAVerifiedCopy: a kept copy that no longer verifies
// (expired, or of an older version than the state says is applied) is dropped, the
// file left as it is, and no failure reported: the mesh's next copy restarts the
// checks.
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
		if f.a.checkFiles(ctx) || f.file(t) != "edited by hand" {
			t.Fatalf("an expired copy was applied: %q", f.file(t))
		}
		if got := f.a.Applied(); got.LastErrorCode != "" {
			t.Fatalf("an expired kept copy reported a failure: %+v", got)
		}
		if _, err := os.Stat(filepath.Join(f.dir, KeptFileName)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("the unusable copy is still kept: %v", err)
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
		if a.checkFiles(ctx) || f.file(t) != "edited by hand" {
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
		if a.checkFiles(ctx) || f.file(t) != "edited by hand" || a.Applied().LastErrorCode != "" {
			t.Fatalf("a damaged copy: file %q, %+v", f.file(t), a.Applied())
		}
	})
}

// TestTheFileCheckReportsAFailureOnce: a put back that fails is the node's failure
// (apply_failed for the applied version), reported at the first check that finds
// it and not again at each later one; a check that finds the root as declared
// again ends it.
func TestTheFileCheckReportsAFailureOnce(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.a.handle(ctx, f.decl(t, 1, "declared")); err != nil {
		t.Fatal(err)
	}
	flaky := &flakyApplier{blocked: true, inner: f.a.applier}
	f.a.applier = flaky
	if !f.a.checkFiles(ctx) {
		t.Fatal("the failure was not reported as a change")
	}
	if got := f.a.Applied(); got.LastErrorCode != wire.StatusApplyFailed || got.LastErrorVersion != 1 {
		t.Fatalf("after a failed put back: %+v", got)
	}
	for range 3 {
		if f.a.checkFiles(ctx) {
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
	if !f.a.checkFiles(ctx) {
		t.Fatal("the end of the failure was not reported")
	}
	if got := f.a.Applied(); got.LastErrorCode != "" {
		t.Fatalf("the root is as declared and the failure stays: %+v", got)
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
	if f.a.checkFiles(ctx) || f.file(t) != "mended by hand for v2" {
		t.Fatalf("the check wrote v1 while v2 is retried: %q", f.file(t))
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
