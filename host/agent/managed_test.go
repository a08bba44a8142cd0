package agent

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"mesh/declarations"
	"mesh/host/apply"
	"mesh/host/hooks"
	"mesh/host/state"
	"mesh/host/wire"
)

// recordingApplier records, as it is called, what the state directory says the
// agent manages, and then applies.
type recordingApplier struct {
	dir    string
	inner  apply.Applier
	onDisk [][]string
}

func (r *recordingApplier) Apply(ctx context.Context, files []apply.File, previous []string) (apply.Result, error) {
	a, _ := state.Load(r.dir) // nothing, while breakSaves holds the file's place
	r.onDisk = append(r.onDisk, a.Managed)
	return r.inner.Apply(ctx, files, previous)
}

// declFiles signs version for the fixture's node with a file per path.
func (f *fixture) declFiles(t *testing.T, version uint64, paths ...string) []byte {
	t.Helper()
	var files []declarations.File
	for _, p := range paths {
		c := p + " v" + string(rune('0'+version))
		files = append(files, declarations.File{Path: p, Content: &c})
	}
	env, err := declarations.SignDeclaration(declarations.Declaration{
		Mesh: "m", Node: "n-1", NodeKey: f.nodeKey, Version: version, IssuedAt: t0, ExpiresAt: t0.Add(24 * time.Hour),
		Body: declarations.Body{Files: files},
	}, f.key)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// breakSaves makes the state file unwritable (a directory stands in its place) until
// the returned function puts things back.
func breakSaves(t *testing.T, dir string) func() {
	t.Helper()
	p := state.Path(dir)
	saved, _ := os.ReadFile(p)
	os.Remove(p)
	if err := os.MkdirAll(filepath.Join(p, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	return func() {
		os.RemoveAll(p)
		if saved != nil {
			os.WriteFile(p, saved, 0o600)
		}
	}
}

// TestNewPathsAreOnRecordBeforeTheyAreWritten: every path a declaration adds is in
// the saved record of managed files before the applier writes it, so that a failed
// save or a crash after the apply leaves no file that no record names (the review:
// 300 files declared while the state directory's disk was full, then a one-file
// declaration, left the 300 in the root for good). A record that cannot be saved
// stops the declaration before anything is written, reported with its version and
// tried again; a save that fails after an apply is reported with the applied
// version and tried again at each heartbeat.
func TestNewPathsAreOnRecordBeforeTheyAreWritten(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	rec := &recordingApplier{dir: f.dir, inner: f.a.applier}
	f.a.applier = rec
	if err := f.a.handle(ctx, f.declFiles(t, 1, "etc/a.conf")); err != nil {
		t.Fatal(err)
	}
	if err := f.a.handle(ctx, f.declFiles(t, 2, "etc/a.conf", "etc/b.conf")); err != nil {
		t.Fatal(err)
	}
	if err := f.a.handle(ctx, f.declFiles(t, 3, "etc/a.conf", "etc/b.conf")); err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"etc/a.conf"}, {"etc/a.conf", "etc/b.conf"}, {"etc/a.conf", "etc/b.conf"}}
	if !slices.EqualFunc(rec.onDisk, want, slices.Equal) {
		t.Fatalf("on record as each apply began: %q, want %q", rec.onDisk, want)
	}

	// The record cannot be saved: a declaration adding a path writes nothing.
	fix := breakSaves(t, f.dir)
	raw := f.declFiles(t, 4, "etc/a.conf", "etc/c.conf")
	if err := f.a.handle(ctx, raw); err != nil {
		t.Fatal(err)
	}
	got := f.a.Applied()
	if got.Version != 3 || got.LastErrorCode != wire.StatusStateNotSaved || got.LastErrorVersion != 4 || got.NextAttempt.IsZero() {
		t.Fatalf("with saves failing: %+v", got)
	}
	if _, err := os.Stat(filepath.Join(f.root, "etc/c.conf")); !os.IsNotExist(err) {
		t.Fatalf("a file written while its path could not be put on record: %v", err)
	}
	fix()
	if err := f.a.handle(ctx, raw); err != nil {
		t.Fatal(err)
	}
	if got := f.a.Applied(); got.Version != 4 || got.LastErrorCode != "" {
		t.Fatalf("once saves work again: %+v", got)
	}

	// A save that fails after the apply (same paths: nothing to put on record
	// before) is reported with the applied version, and done at the next heartbeat
	// once the disk takes it.
	fix = breakSaves(t, f.dir)
	if err := f.a.handle(ctx, f.declFiles(t, 5, "etc/a.conf", "etc/c.conf")); err != nil {
		t.Fatal(err)
	}
	if got := f.a.Applied(); got.Version != 5 || got.LastErrorCode != wire.StatusStateNotSaved || got.LastErrorVersion != 5 {
		t.Fatalf("a save failing after the apply: %+v", got)
	}
	f.a.saveAgain()
	if got := f.a.Applied(); got.LastErrorCode != wire.StatusStateNotSaved {
		t.Fatalf("saved again while the disk still refuses: %+v", got)
	}
	fix()
	f.a.saveAgain()
	if got := f.a.Applied(); got.LastErrorCode != "" {
		t.Fatalf("after the disk takes it again: %+v", got)
	}
	if a, err := state.Load(f.dir); err != nil || a.Version != 5 {
		t.Fatalf("on disk: v%d, %v; want v5", a.Version, err)
	}
}

// TestRefreshPutsBackFilesChangedByHand: a managed file edited or removed on the
// host is put back as declared when the applied declaration arrives again (the
// control plane re-signs it every 12 hours), and nothing else is written. Before,
// a refresh applied nothing, and a hand edit stayed until the next declaration
// while the node showed converged.
func TestRefreshPutsBackFilesChangedByHand(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	raw := f.declFiles(t, 1, "etc/a.conf", "etc/b.conf")
	if err := f.a.handle(ctx, raw); err != nil {
		t.Fatal(err)
	}
	a, b := filepath.Join(f.root, "etc/a.conf"), filepath.Join(f.root, "etc/b.conf")
	want, _ := os.ReadFile(a)
	if err := os.WriteFile(a, []byte("hacked"), 0o666); err != nil {
		t.Fatal(err)
	}
	os.Chmod(a, 0o666)
	if err := os.Remove(b); err != nil {
		t.Fatal(err)
	}
	if err := f.a.handle(ctx, raw); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(a); string(got) != string(want) {
		t.Errorf("etc/a.conf after the refresh: %q, want %q", got, want)
	}
	if fi, err := os.Stat(a); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("etc/a.conf's mode after the refresh: %v", fi.Mode())
	}
	if _, err := os.Stat(b); err != nil {
		t.Errorf("etc/b.conf after the refresh: %v", err)
	}
	if got := f.a.Applied(); got.Version != 1 || got.LastErrorCode != "" {
		t.Errorf("after the refresh: %+v", got)
	}
}

// TestHooksOwedSurviveAStop: the hooks a declaration's changes call for are on
// record until they have run; an agent stopped (or killed) before they did runs
// them when it starts again. Before, they were queued in memory only: the node
// showed the version applied and the hook never ran.
func TestHooksOwedSurviveAStop(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	marker := filepath.Join(t.TempDir(), "reloaded")
	hooksFile := filepath.Join(t.TempDir(), "hooks.json")
	if err := os.WriteFile(hooksFile, []byte(`{"hooks":[{"name":"reload","paths":["etc/*.conf"],"run":["sh","-c","printf '%s' \"$MESH_CHANGED\" > `+marker+`"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := hooks.Load(hooksFile)
	if err != nil {
		t.Fatal(err)
	}
	newAgent := func() *Agent {
		a, err := New(Options{StateDir: f.dir, Root: f.root, Hooks: cfg, Now: func() time.Time { return t0 }, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	a := newAgent()
	// The hook worker never takes the batch: the agent stops before it runs.
	a.hookJobs = make(chan hookRun)
	if err := a.handle(ctx, f.declFiles(t, 1, "etc/a.conf", "bin/tool")); err != nil {
		t.Fatal(err)
	}
	if on, err := state.Load(f.dir); err != nil || !slices.Equal(on.HooksPending, []string{"etc/a.conf"}) || on.Version != 1 {
		t.Fatalf("on record after the apply: v%d, hooks owed %q, %v; want v1 and [etc/a.conf]", on.Version, on.HooksPending, err)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatal("the hook ran although the worker never took it")
	}
	a.kp.Wipe()

	b := newAgent()
	b.runOwedHooks() // no worker: runs at once, as Run would queue it
	if got, err := os.ReadFile(marker); err != nil || string(got) != "etc/a.conf" {
		t.Fatalf("after the restart the hook saw %q (%v), want etc/a.conf", got, err)
	}
	if on, err := state.Load(f.dir); err != nil || len(on.HooksPending) != 0 {
		t.Fatalf("on record once the hook ran: %q, %v", on.HooksPending, err)
	}
	// A failed apply owes nothing: it was undone.
	b.applier = failingApplier{}
	if err := b.handle(ctx, f.declFiles(t, 2, "etc/a.conf", "etc/b.conf")); err != nil {
		t.Fatal(err)
	}
	if on, _ := state.Load(f.dir); len(on.HooksPending) != 0 {
		t.Fatalf("hooks owed after a failed apply: %q", on.HooksPending)
	}
}

// TestStopDuringAnApplyIsNoFailure: an apply cut short because the agent is
// stopping is undone and applied at the next start; the node does not report
// apply_failed for it (the review: systemctl stop during a large apply showed the
// host failing, with a retry time).
func TestStopDuringAnApplyIsNoFailure(t *testing.T) {
	f := newFixture(t)
	if err := f.a.handle(context.Background(), f.declFiles(t, 1, "etc/a.conf")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := f.a.handle(ctx, f.declFiles(t, 2, "etc/a.conf", "etc/b.conf")); err != nil {
		t.Fatal(err)
	}
	got := f.a.Applied()
	if got.Version != 1 || got.LastErrorCode != "" || !got.NextAttempt.IsZero() {
		t.Fatalf("after a stop during the apply: %+v", got)
	}
	if _, err := os.Stat(filepath.Join(f.root, "etc/b.conf")); !os.IsNotExist(err) {
		t.Fatalf("etc/b.conf: %v, want it absent", err)
	}
}

// TestRefusalsDoNotHideAFailureOfTheHost: envelopes refused (junk, an old
// declaration replayed) after an apply failed leave the apply's failure reported,
// which is the one an operator must act on, and cost no write to disk. Before, 100
// junk envelopes turned apply_failed v1 into malformed v0, persisted each time.
func TestRefusalsDoNotHideAFailureOfTheHost(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.a.applier = failingApplier{}
	if err := f.a.handle(ctx, f.decl(t, 1, "x")); err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(state.Path(f.dir))
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		if err := f.a.handle(ctx, []byte(`{"payloadType":"x"}`)); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.a.Applied(); got.LastErrorCode != wire.StatusApplyFailed || got.LastErrorVersion != 1 {
		t.Fatalf("after 100 junk envelopes: %s v%d, want apply_failed v1", got.LastErrorCode, got.LastErrorVersion)
	}
	if after, err := os.Stat(state.Path(f.dir)); err != nil || !after.ModTime().Equal(before.ModTime()) {
		t.Fatalf("the state file was written for refusals (%v)", err)
	}
}

// TestPathsOfAFailedApplyAreNotKept: a path put on record for an apply that then
// failed, with nothing changed, is taken off the record again: it may be another's
// directory, which the next declaration would try to remove as no longer declared
// (TestOperatorCommands: a declaration that applies, after one refused for a
// directory in the way, failed on that directory).
func TestPathsOfAFailedApplyAreNotKept(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := os.MkdirAll(filepath.Join(f.root, "etc", "blocked"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := f.a.handle(ctx, f.declFiles(t, 1, "etc/blocked")); err != nil {
		t.Fatal(err)
	}
	if got := f.a.Applied(); got.LastErrorCode != wire.StatusApplyFailed || slices.Contains(got.Managed, "etc/blocked") {
		t.Fatalf("after the refused apply: %+v", got)
	}
	if err := f.a.handle(ctx, f.declFiles(t, 2, "etc/a.conf")); err != nil {
		t.Fatal(err)
	}
	if got := f.a.Applied(); got.Version != 2 || got.LastErrorCode != "" {
		t.Fatalf("the next declaration: %+v", got)
	}
	if on, _ := state.Load(f.dir); slices.Contains(on.Managed, "etc/blocked") {
		t.Fatalf("on record: %q", on.Managed)
	}
}

// halfApplier writes the first declared file, then fails as an apply whose rollback
// failed too: the managed root is left a mixture of old and new.
type halfApplier struct{ root string }

func (h halfApplier) Apply(_ context.Context, files []apply.File, _ []string) (apply.Result, error) {
	p := filepath.Join(h.root, filepath.FromSlash(files[0].Path))
	if err := os.WriteFile(p, files[0].Data, files[0].Mode); err != nil {
		return apply.Result{}, err
	}
	return apply.Result{}, &apply.ApplyError{Path: files[1].Path, Err: errors.New("input/output error"),
		RolledBack: false, RollbackErr: errors.New("restoring " + files[0].Path + ": input/output error")}
}

// TestAHookIsOwedForAnApplyNotRolledBack: an apply that wrote etc/a.conf, failed on
// etc/b.conf and could not restore etc/a.conf owes a.conf's hook; the attempt that
// succeeds later finds a.conf already as declared (unchanged) and writes b.conf, and
// runs both hooks. Before, it ran b.conf's alone: the service reading a.conf was
// never reloaded, with the node converged and nothing owed (a fault injection on
// renameat found it). Until then the owed path is on record, for a restart.
func TestAHookIsOwedForAnApplyNotRolledBack(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	log := filepath.Join(t.TempDir(), "hooks.log")
	hooksFile := filepath.Join(t.TempDir(), "hooks.json")
	js := `{"hooks":[` +
		`{"name":"hook-a","paths":["etc/a.conf"],"run":["sh","-c","echo hook-a >> ` + log + `"]},` +
		`{"name":"hook-b","paths":["etc/b.conf"],"run":["sh","-c","echo hook-b >> ` + log + `"]}]}`
	if err := os.WriteFile(hooksFile, []byte(js), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := hooks.Load(hooksFile)
	if err != nil {
		t.Fatal(err)
	}
	a := f.withHooks(t, cfg)
	ran := func() string { b, _ := os.ReadFile(log); return strings.Join(strings.Fields(string(b)), " ") }
	if err := a.handle(ctx, f.declFiles(t, 1, "etc/a.conf", "etc/b.conf")); err != nil {
		t.Fatal(err)
	}
	if got := ran(); got != "hook-a hook-b" {
		t.Fatalf("after v1 the hooks ran %q", got)
	}
	real := a.applier
	a.applier = halfApplier{root: f.root}
	v2 := f.declFiles(t, 2, "etc/a.conf", "etc/b.conf")
	if err := a.handle(ctx, v2); err != nil {
		t.Fatal(err)
	}
	if a.applied.Version != 1 {
		t.Fatalf("a failed apply moved the version to %d", a.applied.Version)
	}
	if on, err := state.Load(f.dir); err != nil || !slices.Contains(on.HooksPending, "etc/a.conf") {
		t.Fatalf("on record after the apply that was not rolled back: owed %q (%v), want etc/a.conf among them", on.HooksPending, err)
	}
	a.applier = real
	if err := a.handle(ctx, v2); err != nil {
		t.Fatal(err)
	}
	if a.applied.Version != 2 {
		t.Fatalf("the second attempt left v%d", a.applied.Version)
	}
	if got := ran(); got != "hook-a hook-b hook-a hook-b" {
		t.Fatalf("after the second attempt the hooks ran %q, want hook-a and hook-b again", got)
	}
	if on, err := state.Load(f.dir); err != nil || len(on.HooksPending) != 0 {
		t.Fatalf("owed once the hooks ran: %q, %v", on.HooksPending, err)
	}
	// A later declaration that changes only b.conf runs hook-b alone: nothing
	// owed is left over.
	c := "etc/b.conf v3"
	env, err := declarations.SignDeclaration(declarations.Declaration{
		Mesh: "m", Node: "n-1", NodeKey: f.nodeKey, Version: 3, IssuedAt: t0, ExpiresAt: t0.Add(24 * time.Hour),
		Body: declarations.Body{Files: []declarations.File{{Path: "etc/a.conf", Content: strPtr("etc/a.conf v2")}, {Path: "etc/b.conf", Content: &c}}},
	}, f.key)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.handle(ctx, env); err != nil {
		t.Fatal(err)
	}
	if got := ran(); got != "hook-a hook-b hook-a hook-b hook-b" {
		t.Fatalf("after v3 the hooks ran %q, want hook-b alone added", got)
	}
}

func strPtr(s string) *string { return &s }

// TestTheAgentSaysWhatItCouldNotSave: while the applied state cannot be written,
// the agent's answer to `meshhost status` holds what it applied and why it is not
// saved; the state file, which status read alone, said the version before (the
// control plane heard state_not_saved v2 while status said v1, no error). Once a
// save succeeds, nothing is said.
func TestTheAgentSaysWhatItCouldNotSave(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.a.handle(ctx, f.decl(t, 1, "one")); err != nil {
		t.Fatal(err)
	}
	if u := f.a.linkStatus().Unsaved; u != nil {
		t.Fatalf("saved, and the agent says %+v", u)
	}
	restore := breakSaves(t, f.dir)
	if err := f.a.handle(ctx, f.decl(t, 2, "two")); err != nil {
		t.Fatal(err)
	}
	u := f.a.linkStatus().Unsaved
	if u == nil || !u.HaveApplied || u.Version != 2 || u.Error == "" || u.ExpiresAt.IsZero() {
		t.Fatalf("with saves failing the agent says %+v, want v2 applied and why it is not saved", u)
	}
	restore()
	f.a.saveAgain()
	if u := f.a.linkStatus().Unsaved; u != nil {
		t.Fatalf("saved again, and the agent says %+v", u)
	}
	if on, err := state.Load(f.dir); err != nil || on.Version != 2 {
		t.Fatalf("on record: v%d, %v", on.Version, err)
	}
}

// TestAPathLeftInPlaceIsLogged: a managed file made a directory on the host (by
// hand, by a package), and then a declaration that no longer names it, applies:
// the directory is left where it is and the agent's log says so, with the path and
// why, once for the declaration and once for each put back that finds it still on
// record. Before, the apply was refused (apply_failed), retried forever, and so was
// every later declaration, with no word of what to do.
func TestAPathLeftInPlaceIsLogged(t *testing.T) {
	f := newFixture(t)
	var logged bytes.Buffer
	f.a.log = slog.New(slog.NewTextHandler(&logged, nil))
	ctx := context.Background()
	if err := f.a.handle(ctx, f.declFiles(t, 1, "etc/a.conf", "etc/old.conf")); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(f.root, "etc", "old.conf")
	if err := os.Remove(old); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(old, 0o755); err != nil {
		t.Fatal(err)
	}
	raw := f.declFiles(t, 2, "etc/a.conf")
	if err := f.a.handle(ctx, raw); err != nil {
		t.Fatal(err)
	}
	got := f.a.Applied()
	if got.Version != 2 || got.LastErrorCode != "" || !slices.Equal(got.Managed, []string{"etc/a.conf"}) {
		t.Fatalf("after a declaration without etc/old.conf, now a directory: version %d, %q %q, managed %v",
			got.Version, got.LastErrorCode, got.LastError, got.Managed)
	}
	const said = "left in place"
	if n := strings.Count(logged.String(), said); n != 1 || !strings.Contains(logged.String(), "etc/old.conf: a directory is in its place") {
		t.Fatalf("%d lines saying a path was %s, want 1 naming etc/old.conf and why:\n%s", n, said, logged.String())
	}
	if fi, err := os.Lstat(old); err != nil || !fi.IsDir() {
		t.Fatalf("the directory: %v", err)
	}
	// Still on record (the agent killed between saving the paths it was about to
	// write and the apply): a put back says it too.
	f.a.applied.Managed = append(f.a.applied.Managed, "etc/old.conf")
	if err := f.a.handle(ctx, raw); err != nil {
		t.Fatal(err)
	}
	if got := f.a.Applied(); got.LastErrorCode != "" {
		t.Fatalf("the put back: %q %q", got.LastErrorCode, got.LastError)
	}
	if n := strings.Count(logged.String(), said); n != 2 {
		t.Fatalf("%d lines saying a path was %s, want 2:\n%s", n, said, logged.String())
	}
}

// TestAnApplyCutOffIsNotBlamedOnABackup (durability audit, finding 2): a path an
// apply recorded as managed before its first write, the agent killed before it
// wrote it, is missing at the next start. The applied declaration (the kept copy)
// does not name it: the log says an apply was cut off, not that the root was
// restored from an older backup or the file removed by hand, which sent the
// operator looking for a restore nobody made. A file the applied declaration
// names, missing, is still said the old way.
func TestAnApplyCutOffIsNotBlamedOnABackup(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.a.handle(ctx, f.declFiles(t, 1, "etc/a.conf")); err != nil {
		t.Fatal(err)
	}
	f.a.checkFiles(ctx) // keeps the copy of v1 on disk
	// v2 adds other/c.conf: on record before it is written, then the kill.
	f.a.applied.Managed = append(f.a.applied.Managed, "other/c.conf")
	f.a.save()
	f.a.kp.Wipe()
	var logged bytes.Buffer
	a, err := New(Options{StateDir: f.dir, Root: f.root, Now: func() time.Time { return t0 }, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	const cutOff, backup = "an apply was cut off", "restored from an older backup"
	if !a.managedMissing() {
		t.Fatal("the path an apply cut off had not written is not missing")
	}
	if log := logged.String(); !strings.Contains(log, cutOff) || !strings.Contains(log, "first=other/c.conf") || strings.Contains(log, backup) {
		t.Fatalf("want the apply cut off named, and no backup:\n%s", log)
	}
	if err := os.Remove(filepath.Join(f.root, "etc", "a.conf")); err != nil {
		t.Fatal(err)
	}
	logged.Reset()
	if !a.managedMissing() {
		t.Fatal("not missing")
	}
	for _, line := range strings.Split(strings.TrimSpace(logged.String()), "\n") {
		if strings.Contains(line, backup) != strings.Contains(line, "first=etc/a.conf") {
			t.Errorf("the backup or the hand is blamed for the wrong path: %s", line)
		}
	}
	if n := strings.Count(logged.String(), "\n"); n != 2 {
		t.Errorf("%d lines, want one for each cause:\n%s", n, logged.String())
	}
}

// TestAMissingRootIsSaidAsSuch (a walkthrough of declarations.md): an agent run with
// a mistyped --root found every managed file missing, and said the root was restored
// from an older backup or the files removed by hand; the first apply then made the
// root at the mistyped path. It says the root itself is missing, and that a
// mistyped --root is to be fixed, and still asks for the declaration again.
func TestAMissingRootIsSaidAsSuch(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.a.handle(ctx, f.declFiles(t, 1, "etc/a.conf")); err != nil {
		t.Fatal(err)
	}
	f.a.kp.Wipe()
	var logged bytes.Buffer
	typo := filepath.Join(filepath.Dir(f.root), "typo-root")
	a, err := New(Options{StateDir: f.dir, Root: typo, Now: func() time.Time { return t0 }, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if !a.managedMissing() {
		t.Fatal("a root that does not exist: the declaration is not asked for again")
	}
	if log := logged.String(); !strings.Contains(log, "the managed root does not exist") || !strings.Contains(log, "mistyped --root") ||
		!strings.Contains(log, "root="+typo) || strings.Contains(log, "restored from an older backup") {
		t.Fatalf("want the missing root named, and no backup:\n%s", log)
	}
}
