package agent

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"mesh/declarations"
	"mesh/host/apply"
	"mesh/host/state"
	"mesh/host/wire"
)

// switchedApplier fails, as a file where a directory must go does, while blocked;
// it may be switched from another goroutine than the agent's loop.
type switchedApplier struct {
	blocked atomic.Bool
	inner   apply.Applier
}

func (s *switchedApplier) Apply(ctx context.Context, files []apply.File, managed []string) (apply.Result, error) {
	if s.blocked.Load() {
		return apply.Result{}, &apply.ApplyError{Path: "etc/app.conf", Err: errors.New("a file stands where a directory must go"), RolledBack: true}
	}
	return s.inner.Apply(ctx, files, managed)
}

// TestARetryNotValidYetIsTriedAgain: the clock is set back by more than the
// tolerance (an hour) while a failed apply waits for its next attempt, which then
// refuses the declaration as not valid yet. The running agent tries it again with
// its backoff, announcing the next attempt by its clock, and once the clock is right
// and the host fixed, applies it. Before (an audit), that attempt was the last: the
// retry stayed pending, the file check off, and the next attempt announced in the
// past, until the declaration was re-signed up to 12 hours later.
func TestARetryNotValidYetIsTriedAgain(t *testing.T) {
	f := newFixture(t)
	var offset atomic.Int64
	f.a.o.Now = func() time.Time { return t0.Add(time.Duration(offset.Load())) }
	f.a.o.RetryMin = 50 * time.Millisecond
	app := &switchedApplier{inner: f.a.applier}
	app.blocked.Store(true)
	f.a.applier = app
	if err := f.a.handle(context.Background(), f.decl(t, 1, "one")); err != nil {
		t.Fatal(err)
	}
	offset.Store(int64(-2 * time.Hour)) // before the first attempt fires
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.a.Run(ctx) }() // its broker (127.0.0.1:1) refuses: no mesh
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	waitState := func(what string, ok func(state.Applied) bool) state.Applied {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			on, err := state.Load(f.dir)
			if err != nil {
				t.Fatal(err)
			}
			if ok(on) {
				return on
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s within 5 s (attempts from 50 ms apart): the state holds %q v%d, next attempt %v, applied %v",
					what, on.LastErrorCode, on.LastErrorVersion, on.NextAttempt, on.HaveApplied)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// An attempt refused under the clock set back is followed by another, due by
	// that clock (not in its past).
	on := waitState("no attempt announced after the one refused as not valid yet", func(on state.Applied) bool {
		return on.NextAttempt.Before(t0) && !on.NextAttempt.IsZero()
	})
	if on.LastErrorCode != wire.StatusApplyFailed || on.LastErrorVersion != 1 || !on.NextAttempt.After(t0.Add(-2*time.Hour)) {
		t.Fatalf("after the attempt refused as not valid yet: %q v%d, next attempt %v", on.LastErrorCode, on.LastErrorVersion, on.NextAttempt)
	}
	offset.Store(int64(time.Minute)) // the clock is right again
	app.blocked.Store(false)         // and the host fixed by hand
	waitState("the declaration not applied once the clock was right and the host fixed", func(on state.Applied) bool {
		return on.HaveApplied && on.Version == 1 && on.LastErrorCode == "" && on.NextAttempt.IsZero()
	})
	if got := f.file(t); got != "one" {
		t.Fatalf("applied, the file holds %q", got)
	}
}

// TestARetryRefusedAfterARotationAsksTheMesh: a signing-key rotation while a failed
// apply waits for its next attempt: the attempt refuses the declaration (signed
// under the keyring before), which no waiting makes valid again. The attempts end,
// none is announced, and the agent asks the mesh for its copy (which it signs under
// the keyring of the moment for a sync); that copy applies on the host fixed
// meanwhile. Before (an audit), the retry stayed pending with nothing more to try:
// the file check off and the next attempt announced in the past, while the mesh,
// told that the node retries by itself, sent nothing.
func TestARetryRefusedAfterARotationAsksTheMesh(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	app := &switchedApplier{inner: f.a.applier}
	app.blocked.Store(true)
	f.a.applier = app
	if err := f.a.handle(ctx, f.decl(t, 1, "one")); err != nil {
		t.Fatal(err)
	}
	kr, err := declarations.SignKeyring(declarations.Keyring{Mesh: "m", Epoch: 1, Keys: f.a.id.SigningKeys, IssuedAt: t0}, f.key)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.a.handle(ctx, kr); err != nil || f.a.keyring.Epoch != 1 {
		t.Fatalf("keyring: %v", err)
	}
	app.blocked.Store(false) // fixed by hand
	// The attempt, as the loop makes it when it is due.
	if err := f.a.handle(ctx, f.a.retry.raw); err != nil {
		t.Fatal(err)
	}
	if f.a.retry.raw != nil || f.a.retry.due() != nil || !f.a.applied.NextAttempt.IsZero() {
		t.Fatalf("the refused retry is still pending (next attempt %v): nothing fires it again, and the file check stays off", f.a.applied.NextAttempt)
	}
	if on, _ := state.Load(f.dir); !on.NextAttempt.IsZero() {
		t.Fatalf("the next attempt stays on record: %v", on.NextAttempt)
	}
	if !f.a.syncWanted {
		t.Fatal("the mesh is not asked for its copy")
	}
	if st := reported(t, f.a); st.Error == nil || st.Error.Code != wire.StatusApplyFailed || st.Error.Version != 1 || !st.Error.RetryAt.IsZero() {
		t.Fatalf("report: %+v", st.Error)
	}
	// What the mesh sends for the sync: the declaration under the keyring.
	content := "one"
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
	if got := f.a.Applied(); !got.HaveApplied || got.Version != 1 || got.LastErrorCode != "" || f.file(t) != "one" {
		t.Fatalf("the mesh's copy: %+v, file %q", got, f.file(t))
	}
}

// TestARetryExpiredByAClockAheadIsAskedForOnceTheClockIsRight: the clock jumps days
// ahead while a newer declaration waits for its next attempt: the attempt refuses it
// as expired, and so does the agent the copy the mesh sends (the same: the mesh's
// clock is right, no re-sign due). Once the clock is set right, the agent asks the
// mesh again, as it does for an applied declaration refused for its validity.
// Before (an audit), nothing asked: the node reported apply_failed, which the mesh
// does not send to, until the declaration was re-signed up to 12 hours later.
func TestARetryExpiredByAClockAheadIsAskedForOnceTheClockIsRight(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	now := t0
	f.a.o.Now = func() time.Time { return now }
	if err := f.a.handle(ctx, f.decl(t, 1, "one")); err != nil {
		t.Fatal(err)
	}
	app := &switchedApplier{inner: f.a.applier}
	app.blocked.Store(true)
	f.a.applier = app
	v2 := f.decl(t, 2, "two")
	if err := f.a.handle(ctx, v2); err != nil {
		t.Fatal(err)
	}
	now = t0.Add(72 * time.Hour)
	if !f.a.noteStale() { // a heartbeat
		t.Fatal("setup: not stale 3 days ahead")
	}
	if err := f.a.handle(ctx, f.a.retry.raw); err != nil { // the attempt
		t.Fatal(err)
	}
	if f.a.retry.raw != nil || !f.a.syncWanted {
		t.Fatalf("an expired retry: pending %v, the mesh asked %v", f.a.retry.raw != nil, f.a.syncWanted)
	}
	f.a.syncWanted = false
	if err := f.a.handle(ctx, v2); err != nil { // the mesh's copy
		t.Fatal(err)
	}
	if f.a.syncWanted {
		t.Fatal("the mesh's copy refused asks for itself again at once")
	}
	now = t0.Add(time.Hour) // NTP sets the clock right
	if turned := f.a.noteStale(); !turned || !f.a.clockMayHelp() {
		t.Fatalf("the clock right again: turned %v, the mesh asked %v (reporting %q v%d)", turned, f.a.clockMayHelp(), f.a.applied.LastErrorCode, f.a.applied.LastErrorVersion)
	}
	// The host fixed by hand, the copy that sync brings applies.
	app.blocked.Store(false)
	if err := f.a.handle(ctx, v2); err != nil {
		t.Fatal(err)
	}
	if got := f.a.Applied(); got.Version != 2 || got.LastErrorCode != "" || f.file(t) != "two" {
		t.Fatalf("the mesh's copy with the clock right: %+v, file %q", got, f.file(t))
	}
}
