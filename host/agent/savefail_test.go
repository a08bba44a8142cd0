package agent

import (
	"context"
	"strings"
	"testing"

	"mesh/host/state"
	"mesh/host/wire"
)

// TestAnApplyFailureOutlivesAFailedSave: an apply that fails while the state
// cannot be saved either (the file system went read-only after an error, the
// managed root and the state directory on it) is reported as apply_failed for the
// version that failed, and the save's failure is said by `meshhost status`. Before,
// the save's failure took its place as state_not_saved for the version applied
// before: `meshctl declare --wait` waited out its timeout and said the node did not
// apply it in time, instead of that it failed.
func TestAnApplyFailureOutlivesAFailedSave(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.a.handle(ctx, f.decl(t, 1, "one")); err != nil {
		t.Fatal(err)
	}
	f.a.applier = failingApplier{}
	restore := breakSaves(t, f.dir)
	if err := f.a.handle(ctx, f.decl(t, 2, "two")); err != nil {
		t.Fatal(err)
	}
	wantApplyFailed := func(when string) {
		t.Helper()
		st := reported(t, f.a)
		if st.AppliedVersion != 1 || st.Error == nil || st.Error.Code != wire.StatusApplyFailed || st.Error.Version != 2 || st.Error.RetryAt.IsZero() {
			t.Fatalf("%s: reported v%d, error %+v; want apply_failed v2 with its retry", when, st.AppliedVersion, st.Error)
		}
	}
	wantApplyFailed("with saves failing")
	if u := f.a.linkStatus().Unsaved; u == nil || u.Version != 1 || u.Error == "" || !strings.HasPrefix(u.Failure, wire.StatusApplyFailed+": ") {
		t.Fatalf("with saves failing the agent says %+v, want v1 held, why it is not saved, and the apply's failure (meshhost status shows it)", u)
	}

	f.a.saveAgain() // a heartbeat while the disk still refuses
	wantApplyFailed("saved again while the disk still refuses")

	restore()
	f.a.saveAgain()
	wantApplyFailed("saved again")
	if u := f.a.linkStatus().Unsaved; u != nil {
		t.Fatalf("saved again, and the agent says %+v", u)
	}
	if on, err := state.Load(f.dir); err != nil || on.Version != 1 || on.LastErrorCode != wire.StatusApplyFailed || on.LastErrorVersion != 2 {
		t.Fatalf("on record: v%d, %q v%d (%v); want v1, apply_failed v2", on.Version, on.LastErrorCode, on.LastErrorVersion, err)
	}
}
