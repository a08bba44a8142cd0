package agent

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/host/wire"
)

// rootGoneFixture is an agent whose managed root, base/vol/root, is apart from its
// state directory, as on a host whose root is on a file system of its own, with a
// hook that counts its runs and a log the test reads.
type rootGoneFixture struct {
	*fixture
	vol  string
	log  *strings.Builder
	runs func(name string) int
}

func newRootGoneFixture(t *testing.T) *rootGoneFixture {
	t.Helper()
	f := newFixture(t)
	cfg, runs := countingHooks(t, func(dir string) string {
		return `{"hooks":[{"name":"reload","paths":["etc/*"],"run":["sh","-c","echo run >> ` + dir + `/reload"]}]}`
	})
	vol := filepath.Join(t.TempDir(), "vol")
	f.root = filepath.Join(vol, "root")
	if err := os.MkdirAll(f.root, 0o755); err != nil { // statedir.PrepareRoot's, as meshhost run starts
		t.Fatal(err)
	}
	var logged strings.Builder
	f.a.kp.Wipe()
	a, err := New(Options{StateDir: f.dir, Root: f.root, Hooks: cfg, Now: func() time.Time { return t0 },
		Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	f.a = a
	if err := a.handle(context.Background(), f.decl(t, 1, "declared")); err != nil {
		t.Fatal(err)
	}
	if runs("reload") != 1 || f.file(t) != "declared" {
		t.Fatalf("setup: the hook ran %d times, the file holds %q", runs("reload"), f.file(t))
	}
	return &rootGoneFixture{fixture: f, vol: vol, log: &logged, runs: runs}
}

// refusedOnce asserts that the file check reports the root gone as apply_failed,
// logged as such once over two checks, not as files put back, and that no hook ran.
func (f *rootGoneFixture) refusedOnce(t *testing.T, when string) {
	t.Helper()
	ctx := context.Background()
	if out := f.a.checkFiles(ctx); !out.report || out.putBack {
		t.Fatalf("%s: the check reported %+v, want the failure reported and nothing put back", when, out)
	}
	if out := f.a.checkFiles(ctx); out.report {
		t.Fatalf("%s: the same failure reported again", when)
	}
	st := reported(t, f.a)
	if st.Error == nil || st.Error.Code != wire.StatusApplyFailed || st.Error.Version != 1 || !strings.Contains(st.Error.Message, "the managed root ") {
		t.Fatalf("%s: the mesh is told %+v, want apply_failed v1 naming the managed root", when, st.Error)
	}
	logged := f.log.String()
	if n := strings.Count(logged, "the managed root is gone or is another directory"); n != 1 {
		t.Fatalf("%s: logged %d times, want once:\n%s", when, n, logged)
	}
	if strings.Contains(logged, "put back as declared") {
		t.Fatalf("%s: logged as files put back:\n%s", when, logged)
	}
	if n := f.runs("reload"); n != 1 {
		t.Fatalf("%s: the hook ran %d times, want 1 (the declaration's)", when, n)
	}
	if n := f.putBackCount(); n != 0 {
		t.Fatalf("%s: %d files counted put back", when, n)
	}
}

// backAndPutBack asserts that, the root back and its file edited, the check puts
// the file back, runs its hook and ends the failure.
func (f *rootGoneFixture) backAndPutBack(t *testing.T, hookRuns int) {
	t.Helper()
	f.handEdit(t, "edited while the root was away")
	if out := f.a.checkFiles(context.Background()); !out.putBack || !out.report {
		t.Fatalf("the root back: the check reported %+v", out)
	}
	if got := f.a.Applied(); got.LastErrorCode != "" || f.file(t) != "declared" || f.runs("reload") != hookRuns {
		t.Fatalf("the root back: error %q, file %q, hook ran %d times", got.LastErrorCode, f.file(t), f.runs("reload"))
	}
}

// TestAVanishedRootIsReportedNotRebuilt: the file system under the managed root
// unmounted while the agent runs (here its parent moved away) is not drift to put
// back: the check rebuilt the root, parents included, under the mount point, wrote
// every declared file there, ran the hooks and logged "put back as declared", the
// node converged. Now it reports apply_failed, saying the root is gone, logs it
// once, makes nothing and runs no hook; once the root is back, the check puts back
// what changed and the failure ends.
func TestAVanishedRootIsReportedNotRebuilt(t *testing.T) {
	f := newRootGoneFixture(t)
	away := f.vol + ".away"
	if err := os.Rename(f.vol, away); err != nil {
		t.Fatal(err)
	}
	f.refusedOnce(t, "the root's file system gone")
	if _, err := os.Lstat(f.vol); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("%s was made again: %v", f.vol, err)
	}
	if err := os.Rename(away, f.vol); err != nil {
		t.Fatal(err)
	}
	f.backAndPutBack(t, 2)
}

// TestARootSwappedForALinkIsNotWrittenInto: the managed root replaced by a link to
// another directory of root's is refused, not filled with the declared files (nor
// emptied of the files no longer declared); moved back, it is the root again.
func TestARootSwappedForALinkIsNotWrittenInto(t *testing.T) {
	f := newRootGoneFixture(t)
	other := filepath.Join(filepath.Dir(f.vol), "other")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "keep.txt"), []byte("theirs"), 0o644); err != nil {
		t.Fatal(err)
	}
	away := f.root + ".away"
	if err := os.Rename(f.root, away); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, f.root); err != nil {
		t.Fatal(err)
	}
	f.refusedOnce(t, "the root swapped for a link")
	if entries, _ := os.ReadDir(other); len(entries) != 1 {
		t.Fatalf("the directory the link aims at holds %v, want keep.txt alone", entries)
	}
	if err := os.Remove(f.root); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(away, f.root); err != nil {
		t.Fatal(err)
	}
	f.backAndPutBack(t, 2)
}

// TestTheRootTheAgentStartsWithIsTheOne: the managed root is the directory there as
// the agent starts, not the first one an apply finds: unmounted before the first
// declaration, its mount point is refused too.
func TestTheRootTheAgentStartsWithIsTheOne(t *testing.T) {
	f := newFixture(t)
	f.root = filepath.Join(t.TempDir(), "root")
	if err := os.Mkdir(f.root, 0o755); err != nil {
		t.Fatal(err)
	}
	f.a.kp.Wipe()
	a, err := New(Options{StateDir: f.dir, Root: f.root, Now: func() time.Time { return t0 }, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(f.root, f.root+".away"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(f.root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := a.handle(context.Background(), f.decl(t, 1, "declared")); err != nil {
		t.Fatal(err)
	}
	if st := reported(t, a); st.Error == nil || st.Error.Code != wire.StatusApplyFailed || !strings.Contains(st.Error.Message, "another directory") {
		t.Fatalf("a declaration into the mount point: %+v, want apply_failed saying the root is another directory", st.Error)
	}
	if entries, _ := os.ReadDir(f.root); len(entries) != 0 {
		t.Fatalf("written into the other directory: %v", entries)
	}
	a.retry.clear()
}
