package backup

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"mesh/controlplane/datadir"
	"mesh/controlplane/replication"
)

// fakeSource writes a Raft store of one file, at the index it is told, or fails as
// it is told after writing part of it.
type fakeSource struct {
	mu    sync.Mutex
	index uint64
	// fail, when set, is returned after raft/ and a part of the store are
	// written; cancel, when set, is called there instead.
	fail   error
	cancel context.CancelFunc
	calls  int
}

func (s *fakeSource) BackUp(_ context.Context, dir string) (replication.BackupStore, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if err := os.Mkdir(dir, 0o700); err != nil {
		return replication.BackupStore{}, err
	}
	if err := os.WriteFile(filepath.Join(dir, "raft.db"), []byte("store"), 0o600); err != nil {
		return replication.BackupStore{}, err
	}
	if s.cancel != nil {
		s.cancel()
	}
	if s.fail != nil {
		return replication.BackupStore{}, s.fail
	}
	return replication.BackupStore{Index: s.index, Term: 2, CurrentTerm: 3, Taken: true, Size: 5}, nil
}

// dataFiles are the files of the data directory the tests back up, with their
// modes: the keys private, the certificates and mesh.json readable.
var dataFiles = map[string]fs.FileMode{
	datadir.ConfigFile: 0o644, datadir.CACertFile: 0o644, datadir.TLSCertFile: 0o644,
	datadir.TLSKeyFile: 0o600, datadir.SigningKeyFile: 0o600, datadir.CurveKeyFile: 0o600,
	datadir.AdminCredsFile: 0o600, datadir.CAKeyFile: 0o600, "extra.txt": 0o640,
}

// makeData makes a data directory: dataFiles, each holding its name, and what a
// backup leaves out: the lock, a write's temporary file, raft/ with a log in it,
// a directory of something else, and the keys a join stopped at its last step
// left (join-pending.json: the node's private keys a second time).
func makeData(t *testing.T) datadir.Dir {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "cp")
	for _, d := range []string{dir, filepath.Join(dir, datadir.RaftDir), filepath.Join(dir, "other")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]fs.FileMode{datadir.LockFile: 0o600, ".mesh.json.tmp-123": 0o600, datadir.JoinPendingFile: 0o600,
		filepath.Join(datadir.RaftDir, "raft.db"): 0o600, filepath.Join("other", "x"): 0o600}
	for name, mode := range dataFiles {
		files[name] = mode
	}
	for name, mode := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(name), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	return datadir.Dir(dir)
}

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// lockedBuffer is a log the writer's goroutine writes while the test reads.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// testPin is the mesh CA's pin the tests' backups are named by (their first
// MeshTagLen digits: 3f2a9c1e).
const testPin = "3f2a9c1e" + "00000000000000000000000000000000000000000000000000000000"

// newWriter is a writer backing up a fresh data directory into a fresh backup
// directory (not made yet), as node cp-1 of the mesh of testPin, at 2026-12-06
// 09:52:21 UTC.
func newWriter(t *testing.T, src *fakeSource, keep int) (*Writer, *clock, *lockedBuffer) {
	t.Helper()
	c := &clock{t: time.Date(2026, 12, 6, 9, 52, 21, 0, time.UTC)}
	var log lockedBuffer
	w, err := New(Config{Dir: filepath.Join(t.TempDir(), "backups"), Data: makeData(t), Node: "cp-1", CAPin: testPin, Every: time.Hour, Keep: keep,
		Source: src, Logger: slog.New(slog.NewTextHandler(&log, nil)), Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	return w, c, &log
}

// entries lists a directory's names.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// TestABackupIsADataDirectory: a backup is a directory named for the node, the
// time (UTC, to the second) and the index, mode 0700, holding the Raft store its
// source wrote and every file of the data directory with its content and its
// mode (the keys 0600), and nothing else: not the lock, not a write's temporary
// file, not a finished join's leftover keys, not the data directory's own raft/
// nor another directory.
func TestABackupIsADataDirectory(t *testing.T) {
	t.Parallel()
	src := &fakeSource{index: 42}
	w, _, _ := newWriter(t, src, 3)
	b, err := w.Take(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(w.Dir(), "cp-1-3f2a9c1e-20261206T095221Z-i42")
	if b.Path != want || b.Index != 42 {
		t.Fatalf("backup %+v, want %s at index 42", b, want)
	}
	if got := entries(t, w.Dir()); !slices.Equal(got, []string{filepath.Base(want)}) {
		t.Fatalf("the backup directory holds %v, want the backup alone", got)
	}
	if fi, err := os.Stat(b.Path); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the backup: %v, %v; want a directory of mode 0700", fi, err)
	}
	var wantNames []string
	var size int64 = 5 // the store
	for name, mode := range dataFiles {
		wantNames = append(wantNames, name)
		p := filepath.Join(b.Path, name)
		fi, err := os.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != mode {
			t.Errorf("%s: %v, %v; want a file of mode %#o", p, fi, err, mode)
			continue
		}
		if data, _ := os.ReadFile(p); string(data) != name {
			t.Errorf("%s holds %q, want the data directory's %q", p, data, name)
		}
		size += fi.Size()
	}
	wantNames = append(wantNames, datadir.RaftDir)
	slices.Sort(wantNames)
	if got := entries(t, b.Path); !slices.Equal(got, wantNames) {
		t.Errorf("the backup holds %v, want %v", got, wantNames)
	}
	if got := entries(t, filepath.Join(b.Path, datadir.RaftDir)); !slices.Equal(got, []string{"raft.db"}) {
		t.Errorf("the backup's raft/ holds %v, want the source's store alone", got)
	}
	if data, _ := os.ReadFile(filepath.Join(b.Path, datadir.RaftDir, "raft.db")); string(data) != "store" {
		t.Errorf("the backup's raft.db holds %q, want the source's, not the data directory's", data)
	}
	if b.Size != size {
		t.Errorf("size %d, want %d", b.Size, size)
	}
	if s := w.Stats(); !s.LastSuccess.Equal(b.At) || s.LastSize != size || s.Failures != 0 {
		t.Errorf("stats %+v after a backup of %d bytes at %s", s, size, b.At)
	}
}

// TestOnlyTheNewestAreKept: with --backup-keep 3, six backups leave the newest of
// each of the newest three intervals (hours here; by time, then index: two in the
// same second), and the others are removed; another node's backups (one whose id
// begins with this one's), another mesh's node of the same id, other names and
// files in the directory are left alone, and nothing hidden is left of the
// removed ones.
func TestOnlyTheNewestAreKept(t *testing.T) {
	t.Parallel()
	src := &fakeSource{}
	w, c, _ := newWriter(t, src, 3)
	others := []string{"cp-1-1-3f2a9c1e-20200101T000000Z-i1", "cp-10-3f2a9c1e-20200101T000000Z-i1", "cp-1-0badf00d-20200101T000000Z-i1",
		"cp-1-20200101T000000Z-i1", "cp-1-notes", "cp-1-3f2a9c1e-20200101T000000Z-i1.tar"}
	for _, name := range others {
		if err := os.Mkdir(filepath.Join(w.Dir(), name), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	var taken []string
	// 09:52:21, 10:52:21, 11:52:21, 11:53:21 twice, 12:53:21.
	for i, step := range []time.Duration{0, time.Hour, time.Hour, time.Minute, 0, time.Hour} {
		c.add(step)
		src.index = uint64(10 + i)
		b, err := w.Take(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		taken = append(taken, filepath.Base(b.Path))
	}
	want := append(slices.Clone(others), taken[1], taken[4], taken[5])
	slices.Sort(want)
	if got := entries(t, w.Dir()); !slices.Equal(got, want) {
		t.Fatalf("after six backups, keeping 3: %v, want %v", got, want)
	}
}

// TestAskedBackupsDoNotEvictTheHistory (a review): backups asked for after keyring
// changes (Soon) replace one another, and the backup of their interval, within
// their interval; the newest of each earlier interval stays. Counted by number,
// --backup-keep of them in one afternoon removed every backup from before them:
// the copies needed to undo what the operator who made those changes did.
func TestAskedBackupsDoNotEvictTheHistory(t *testing.T) {
	t.Parallel()
	src := &fakeSource{}
	w, c, _ := newWriter(t, src, 3)
	var taken []string
	take := func() {
		t.Helper()
		src.index++
		b, err := w.Take(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		taken = append(taken, filepath.Base(b.Path))
	}
	take() // 09:52:21
	c.add(time.Hour)
	take() // 10:52:21
	c.add(time.Hour)
	take() // 11:52:21
	for range 5 {
		c.add(time.Second)
		take() // asked for, 11:52:22 to 11:52:26
	}
	want := []string{taken[0], taken[1], taken[len(taken)-1]}
	slices.Sort(want)
	if got := entries(t, w.Dir()); !slices.Equal(got, want) {
		t.Fatalf("after three hourly backups and five asked for in the last hour, keeping 3: %v, want %v (the hours before kept)", got, want)
	}
}

// TestAFailedBackupLeavesNothing: a backup that fails part way (its Raft store
// half written, a stop in the middle of it, a name taken already) leaves nothing
// in the backup directory, under a backup's name or any other, and an earlier
// backup is kept. A failure is counted; a stop is not.
func TestAFailedBackupLeavesNothing(t *testing.T) {
	t.Parallel()
	src := &fakeSource{index: 7}
	w, c, _ := newWriter(t, src, 3)
	first, err := w.Take(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	kept := []string{filepath.Base(first.Path)}
	c.add(time.Minute)

	src.fail = errors.New("disk full")
	if _, err := w.Take(context.Background()); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("a backup whose store failed: %v", err)
	}
	if got := entries(t, w.Dir()); !slices.Equal(got, kept) {
		t.Fatalf("after a failed backup the directory holds %v, want %v", got, kept)
	}
	if s := w.Stats(); s.Failures != 1 || !s.LastSuccess.Equal(first.At) {
		t.Fatalf("stats %+v after a failure, want 1 failure and the first backup's time", s)
	}

	// Stopped after the store was written, while the files are copied.
	src.fail = nil
	ctx, cancel := context.WithCancel(context.Background())
	src.cancel = cancel
	if _, err := w.Take(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("a backup stopped part way: %v, want it cancelled", err)
	}
	src.cancel = nil
	if got := entries(t, w.Dir()); !slices.Equal(got, kept) {
		t.Fatalf("after a stopped backup the directory holds %v, want %v", got, kept)
	}
	if s := w.Stats(); s.Failures != 1 {
		t.Fatalf("a stop counted as a failure: %+v", s)
	}

	// Its name taken by something else (an empty directory, which rename(2)
	// would replace; Go's os.Rename refuses it): refused, the something left as
	// it was.
	taken := Name("cp-1", "3f2a9c1e", c.now(), 7)
	if err := os.Mkdir(filepath.Join(w.Dir(), taken), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Take(context.Background()); err == nil {
		t.Fatal("a backup over a name taken succeeded")

	}
	kept = append(kept, taken)
	slices.Sort(kept)
	if got := entries(t, w.Dir()); !slices.Equal(got, kept) {
		t.Fatalf("after a backup whose name was taken the directory holds %v, want %v", got, kept)
	}
	if got := entries(t, filepath.Join(w.Dir(), taken)); len(got) != 0 {
		t.Fatalf("the directory in the backup's place was replaced: it holds %v", got)
	}
}

// TestRunGoesOnAfterAFailure: Run takes a backup at once, logs a failure at WARN
// saying what to do, takes the next at the next interval, logs it at INFO with its
// path, index, size and duration, and returns once its context ends.
func TestRunGoesOnAfterAFailure(t *testing.T) {
	t.Parallel()
	src := &fakeSource{index: 9, fail: errors.New("disk full")}
	w, c, log := newWriter(t, src, 3)
	w.cfg.Every = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for w.Stats().Failures == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no backup was tried at start")
		}
		time.Sleep(time.Millisecond)
	}
	src.mu.Lock()
	src.fail = nil
	src.mu.Unlock()
	c.add(time.Minute)
	for w.Stats().LastSuccess.IsZero() {
		if time.Now().After(deadline) {
			t.Fatalf("no backup after the failure:\n%s", log)
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v, want its context's end", err)
	}
	out := log.String()
	for _, want := range []string{`level=WARN msg="backup failed; this control node goes on serving and tries again in 20ms`, `err="back up the Raft store: disk full"`,
		`level=INFO msg="backup written" component=backup path=` + filepath.Join(w.Dir(), "cp-1-3f2a9c1e-20261206T095321Z-i9") + " index=9 size="} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %q:\n%s", want, out)
		}
	}
}

// TestNewPreparesTheDirectory: a missing backup directory is made, mode 0700; one
// that group or others may write is refused as a data directory is
// (datadir.ErrUnprotected); the data directory itself and anything inside its
// raft/ (through a link too) are refused (ErrPlace); and what a backup of this
// node cut short left is removed, another node's and other names left.
func TestNewPreparesTheDirectory(t *testing.T) {
	t.Parallel()
	data := makeData(t)
	cfg := func(dir string) Config {
		return Config{Dir: dir, Data: data, Node: "cp-1", CAPin: testPin, Every: time.Hour, Keep: 1, Source: &fakeSource{}, Logger: slog.New(slog.DiscardHandler)}
	}
	made := filepath.Join(t.TempDir(), "a", "backups")
	if _, err := New(cfg(made)); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(made); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the backup directory made: %v, %v; want mode 0700", fi, err)
	}

	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	// Named as the backup directory, and mended to the mode it would have been
	// made with: a walkthrough read "the data directory ... chmod 755".
	if _, err := New(cfg(open)); !errors.Is(err, datadir.ErrUnprotected) || !strings.Contains(err.Error(), "then: chmod 700 "+open) ||
		!strings.Contains(err.Error(), "the backup directory is not private") || strings.Contains(err.Error(), "the data directory") {
		t.Fatalf("a backup directory others may write: %v, want it refused as the backup directory, naming chmod 700", err)
	}
	parent := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(parent, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(parent, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := New(cfg(filepath.Join(parent, "backups"))); !errors.Is(err, datadir.ErrUnprotected) ||
		!strings.Contains(err.Error(), "replace the backup directory below it") || !strings.Contains(err.Error(), "choose a backup directory whose parents") {
		t.Fatalf("a backup directory under one others may write: %v, want it refused in the backup directory's words", err)
	}

	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(data.Path(datadir.RaftDir), link); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{string(data), data.Path(datadir.RaftDir), filepath.Join(data.Path(datadir.RaftDir), "b"), filepath.Join(link, "b")} {
		if _, err := New(cfg(dir)); !errors.Is(err, ErrPlace) {
			t.Errorf("backups in %s: %v, want ErrPlace", dir, err)
		}
	}
	if _, err := os.Stat(filepath.Join(data.Path(datadir.RaftDir), "b")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a refused backup directory was made: %v", err)
	}
	if got, err := Resolve("rel", data); err != nil || !filepath.IsAbs(got) {
		t.Errorf("a relative backup directory resolved to %q, %v; want it made absolute", got, err)
	}

	left := []string{".tmp-cp-1-3f2a9c1e-20261206T095221Z-12345", ".tmp-cp-1-3f2a9c1e-20261206T095221Z-6", ".tmp-cp-1-3f2a9c1e-20200101T000000Z-old"}
	stay := []string{".tmp-cp-1-1-3f2a9c1e-20261206T095221Z-12345", ".tmp-cp-10-3f2a9c1e-20261206T095221Z-1", ".tmp-cp-1-0badf00d-20261206T095221Z-1",
		".tmp-other", "cp-1-3f2a9c1e-20261206T095221Z-i4"}
	for _, name := range append(slices.Clone(left), stay...) {
		if err := os.MkdirAll(filepath.Join(made, name, "raft"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := New(cfg(made)); err != nil {
		t.Fatal(err)
	}
	slices.Sort(stay)
	if got := entries(t, made); !slices.Equal(got, stay) {
		t.Fatalf("after a start the backup directory holds %v, want %v", got, stay)
	}
}

// TestAClockSetBackKeepsTheNewBackup: a backup taken after the clock went back
// sorts oldest by the time in its name; it is kept all the same, the older ones
// are removed down to --backup-keep, and the log says the clock is behind. Before,
// the backup just written was removed at once, at every interval, while the log
// said it was written (a review).
func TestAClockSetBackKeepsTheNewBackup(t *testing.T) {
	t.Parallel()
	src := &fakeSource{index: 1}
	w, c, log := newWriter(t, src, 2)
	var names []string
	for range 2 {
		b, err := w.Take(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, filepath.Base(b.Path))
		c.add(time.Hour)
		src.index++
	}
	c.add(-48 * time.Hour)
	b, err := w.Take(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{names[1], filepath.Base(b.Path)}
	slices.Sort(want)
	if got := entries(t, w.Dir()); !slices.Equal(got, want) {
		t.Fatalf("after a backup with the clock set back a day, keeping 2: %v, want %v (the new one and the newest before it)", got, want)
	}
	if !strings.Contains(log.String(), "clock is behind the time of an earlier backup") {
		t.Errorf("the log does not say the clock is behind:\n%s", log)
	}
}

// TestTheFirstBackupWaitsForTheNewestToAge: serve's first backup is taken at once
// when there is none, or the newest is --backup-every old, or ahead of the clock;
// otherwise when the newest is that old. A control node restarted again and again
// took one at each start, and its newest --backup-keep became copies of one state
// (a review).
func TestTheFirstBackupWaitsForTheNewestToAge(t *testing.T) {
	t.Parallel()
	w, c, _ := newWriter(t, &fakeSource{index: 3}, 3)
	if d := w.firstWait(); d != 0 {
		t.Fatalf("with no backup the first waits %s, want none", d)
	}
	if _, err := w.Take(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		by   time.Duration
		want time.Duration
	}{{40 * time.Minute, 20 * time.Minute}, {20 * time.Minute, 0}, {5 * time.Hour, 0}, {-7 * time.Hour, 0}} {
		c.add(step.by)
		if d := w.firstWait(); d != step.want {
			t.Errorf("the newest backup %s old: the first waits %s, want %s", c.now().Sub(time.Date(2026, 12, 6, 9, 52, 21, 0, time.UTC)), d, step.want)
		}
	}
}

// TestTheNewestBackupFoundIsTheLastSuccess (a walkthrough): a control node
// restarted within --backup-every of its newest backup takes none at start, and its
// last-success metric read 0 until the next interval: the age alert the docs
// recommend fired after every restart. A writer starts with the newest backup of
// its node found in the directory as its last success, and its size; another
// node's, newer, is not taken for it.
func TestTheNewestBackupFoundIsTheLastSuccess(t *testing.T) {
	t.Parallel()
	w, c, _ := newWriter(t, &fakeSource{index: 3}, 3)
	if s := w.Stats(); !s.LastSuccess.IsZero() {
		t.Fatalf("an empty directory: last success %s, want none", s.LastSuccess)
	}
	b, err := w.Take(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	taken := w.Stats()
	other := filepath.Join(w.Dir(), Name("cp-2", "3f2a9c1e", c.now().Add(time.Minute), 9))
	if err := os.MkdirAll(other, 0o700); err != nil {
		t.Fatal(err)
	}
	c.add(10 * time.Minute)
	again, err := New(w.cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := again.Stats()
	if !s.LastSuccess.Equal(taken.LastSuccess) || s.LastSize != taken.LastSize || s.LastSize == 0 || s.LastDuration != 0 {
		t.Errorf("restarted after %s (%s): stats %+v, want the last success %s of %d bytes", b.Path, again.firstWait(), s, taken.LastSuccess, taken.LastSize)
	}
}

// runningAfterOne is a writer that took one backup of src a minute ago (its newest,
// younger than the hour between backups) and now runs; stop stops it and waits.
func runningAfterOne(t *testing.T, src *fakeSource) (w *Writer, log *lockedBuffer, stop func()) {
	t.Helper()
	w, c, log := newWriter(t, src, 5)
	if _, err := w.Take(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.add(30 * time.Minute) // 10:22:21: the next's name and interval (hour) differ from the first's; the first wait is 30m
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	return w, log, func() { cancel(); <-done }
}

// waitForBackups waits until w's directory holds n entries.
func waitForBackups(t *testing.T, w *Writer, n int, log *lockedBuffer) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(entries(t, w.Dir())) < n {
		if time.Now().After(deadline) {
			t.Fatalf("no backup after Soon:\n%s", log)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSoonTakesABackupBeforeTheInterval: a backup asked for (a keyring rotated)
// is taken at once, though the newest is younger than the interval: before, a
// restart inside it took none, and the only copies held the keyring before the
// rotation (a docs walkthrough).
func TestSoonTakesABackupBeforeTheInterval(t *testing.T) {
	t.Parallel()
	src := &fakeSource{index: 4}
	w, log, stop := runningAfterOne(t, src)
	time.Sleep(50 * time.Millisecond)
	if n := len(entries(t, w.Dir())); n != 1 {
		t.Fatalf("%d backups before any ask, want the first alone (the interval is an hour)", n)
	}
	src.mu.Lock()
	src.index = 5
	src.mu.Unlock()
	w.Soon()
	waitForBackups(t, w, 2, log)
	time.Sleep(50 * time.Millisecond)
	stop()
	if got := entries(t, w.Dir()); len(got) != 2 || !strings.HasSuffix(got[1], "-i5") {
		t.Fatalf("backups %v, want the first and one of index 5", got)
	}
}

// TestTwoAsksInOneSecondAreOneBackup: a rotation and its retirement applied in one
// batch ask for two backups of one state within a second: the second finds the
// first under its name and keeps it. Before (a review), it was counted a failure
// and logged as a full disk's ("make room in the backup directory").
func TestTwoAsksInOneSecondAreOneBackup(t *testing.T) {
	t.Parallel()
	src := &fakeSource{index: 3}
	w, log, stop := runningAfterOne(t, src)
	src.mu.Lock()
	src.index = 4
	src.mu.Unlock()
	w.Soon() // the rotation's
	waitForBackups(t, w, 2, log)
	w.Soon() // the retirement's, in the first backup's snapshot already
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(log.String(), "a backup of this state was written this second already") {
		if time.Now().After(deadline) {
			t.Fatalf("the second ask was not taken up:\n%s", log)
		}
		time.Sleep(time.Millisecond)
	}
	stop()
	if f := w.Stats().Failures; f != 0 || strings.Contains(log.String(), "backup failed") || len(entries(t, w.Dir())) != 2 {
		t.Fatalf("failures %d, backups %v:\n%s", f, entries(t, w.Dir()), log)
	}
}

// TestABackupAskedForThatFailsIsTriedAgainSoon: a backup Soon asked for that fails
// is tried again within MinEvery, not at the next interval (an hour here): until
// then the only copies are of the keyring before the change.
func TestABackupAskedForThatFailsIsTriedAgainSoon(t *testing.T) {
	t.Parallel()
	src := &fakeSource{index: 3}
	w, log, stop := runningAfterOne(t, src)
	defer stop()
	src.mu.Lock()
	src.fail = errors.New("disk full")
	src.mu.Unlock()
	w.Soon()
	deadline := time.Now().Add(10 * time.Second)
	for w.Stats().Failures == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the backup asked for was not tried")
		}
		time.Sleep(time.Millisecond)
	}
	for !strings.Contains(log.String(), "backup failed") {
		time.Sleep(time.Millisecond)
	}
	if want := "tries again in " + MinEvery.String(); !strings.Contains(log.String(), want) {
		t.Fatalf("the failure does not say %q:\n%s", want, log)
	}
}

// TestAnUnusableDirectoryIsTriedAgain: a backup directory that cannot be made
// (a file in its place, a disk not mounted) does not keep the control node from
// starting: New logs it, each backup fails and is counted until it can be made,
// then backups are taken. One opened to others while serve runs gets no backup.
func TestAnUnusableDirectoryIsTriedAgain(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	dir := filepath.Join(base, "backups")
	if err := os.WriteFile(dir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var log lockedBuffer
	w, err := New(Config{Dir: dir, Data: makeData(t), Node: "cp-1", CAPin: testPin, Every: time.Hour, Keep: 2,
		Source: &fakeSource{index: 5}, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatalf("a backup directory that cannot be made now stopped the start: %v", err)
	}
	if !strings.Contains(log.String(), "cannot be used now") {
		t.Errorf("the start does not say the backup directory cannot be used:\n%s", log.String())
	}
	if _, err := w.Take(context.Background()); err == nil || w.Stats().Failures != 1 {
		t.Fatalf("a backup into a file: %v, stats %+v; want it failed and counted", err, w.Stats())
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Take(context.Background()); err != nil {
		t.Fatalf("a backup once the directory can be made: %v", err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Take(context.Background()); !errors.Is(err, datadir.ErrUnprotected) {
		t.Fatalf("a backup into a directory opened to others: %v, want ErrUnprotected", err)
	}
	if got := entries(t, dir); len(got) != 1 {
		t.Errorf("the directory opened to others holds %v, want the one backup taken before", got)
	}
}

// hungSource is a Raft store's backup that blocks, whatever its context, until
// released: a backup directory on a network file system that stopped answering.
type hungSource struct {
	called  chan struct{}
	release chan struct{}
}

func (s *hungSource) BackUp(context.Context, string) (replication.BackupStore, error) {
	close(s.called)
	<-s.release
	return replication.BackupStore{}, errors.New("released")
}

// TestAStopWaitsForAHungBackupABoundedTime: a backup blocked in the file system
// does not see its context end; serve's stop waited for it until the service
// manager killed the process. Run returns StopGrace after the stop instead, and
// says why.
func TestAStopWaitsForAHungBackupABoundedTime(t *testing.T) {
	t.Parallel()
	src := &hungSource{called: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(func() { close(src.release) })
	var log lockedBuffer
	w, err := New(Config{Dir: filepath.Join(t.TempDir(), "backups"), Data: makeData(t), Node: "cp-1", CAPin: testPin, Every: time.Hour, Keep: 1,
		Source: src, Logger: slog.New(slog.NewTextHandler(&log, nil)), StopGrace: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	<-src.called
	cancel()
	select {
	case err := <-ran:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run still waits for the hung backup 10 s after the stop")
	}
	if !strings.Contains(log.String(), "did not stop within 50ms of the stop") {
		t.Fatalf("log:\n%s", log.String())
	}
}
