// Package backup is a control node's backups of itself, taken while it serves
// (`meshctl serve --backup-dir`): every interval, a directory that is a whole data
// directory, which `meshctl check` passes and `meshctl serve` starts on, holding
// the replicated state as of one Raft index (decision 0037).
//
// A backup is built under a temporary name in the backup directory and renamed
// into place once whole and flushed, so that a name of the backup pattern is
// always a complete backup: the Raft store written through Raft
// (replication.Node.BackUp, never a copy of raft.db), then every other file of the
// data directory copied with its mode. The newest of each of the newest
// Config.Keep intervals of Config.Every is kept.
package backup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"mesh/controlplane/datadir"
	"mesh/controlplane/replication"
	"mesh/host/atomicfile"
)

// Defaults and bounds of a control node's backups, as serve's flags take them.
const (
	// DefaultEvery is how often a backup is taken.
	DefaultEvery = time.Hour
	// MinEvery is the shortest interval: each backup is a snapshot of the whole
	// state and a copy of it.
	MinEvery = time.Minute
	// MaxEvery is the longest: past a week, an interval is a typo (1000h for 10h)
	// that leaves the mesh without a recent backup.
	MaxEvery = 7 * 24 * time.Hour
	// DefaultKeep is how many backups are kept: a day's, hourly.
	DefaultKeep = 24
	// DefaultStopGrace is how long a stop waits for a backup under way to end
	// (Config.StopGrace).
	DefaultStopGrace = 5 * time.Second
)

// Source is the Raft member a backup is taken of: replication.Node.
type Source interface {
	// BackUp writes a consistent copy of the member's Raft store into dir, which
	// it creates.
	BackUp(ctx context.Context, dir string) (replication.BackupStore, error)
}

// Config is a control node's backups.
type Config struct {
	// Dir is the backup directory: absolute, outside the data directory's raft/
	// (Resolve says so). New creates it.
	Dir string
	// Data is the data directory backed up, and Node its control node's id, which
	// names its backups.
	Data datadir.Dir
	Node string
	// CAPin is the mesh CA's pin (hex, as mesh.json holds it): the first
	// MeshTagLen digits name the mesh in the backups' names.
	CAPin string
	// Every is the interval between backups (Run); Keep how many intervals keep
	// one, the newest in each (retain).
	Every time.Duration
	Keep  int
	// Source takes the Raft store's part of a backup.
	Source Source
	Logger *slog.Logger
	// Now is the clock that names the backups and times them; nil means time.Now.
	Now func() time.Time
	// StopGrace is how long Run, stopped, waits for a backup under way, which
	// stops at its next read or write; 0 means DefaultStopGrace. A backup blocked
	// in the kernel (a hung network file system) is left behind: the control node
	// stops without it, rather than until its service manager kills it.
	StopGrace time.Duration
}

// Backup is a backup written.
type Backup struct {
	// Path is the backup's directory.
	Path string
	// Index is the Raft index the state is as of.
	Index uint64
	// Size is the bytes of its files.
	Size int64
	// Took is how long it took to write.
	Took time.Duration
	// At is when it was taken (its name says it to the second).
	At time.Time
	// Existing: a backup of this node under the same name (the same second and
	// Raft index) was there already, and is kept: the new copy, of the same
	// state, was dropped.
	Existing bool
}

// Stats is how a writer's backups went: what the metrics export.
type Stats struct {
	// LastSuccess is when the last backup that succeeded was taken (zero: none
	// taken since the writer started, nor found in the directory), LastSize and
	// LastDuration its size and how long it took (zero for one found).
	LastSuccess  time.Time
	LastSize     int64
	LastDuration time.Duration
	// Failures counts the backups that failed.
	Failures uint64
}

// Writer takes a control node's backups.
type Writer struct {
	cfg Config
	log *slog.Logger
	tag string // the mesh's in the backups' names (Name)
	// soon carries Soon's asks to Run: one waiting at most.
	soon chan struct{}

	mu    sync.Mutex
	stats Stats
}

// New prepares the backup directory for cfg: it creates it (mode 0700) if it is
// missing, refuses it as serve refuses a data directory (datadir.ErrUnprotected,
// in the backup directory's words: another user's, or one group or others may
// write, or under a directory another user could change), and removes what an
// earlier backup of this node cut short left there. A directory that cannot be
// made or read now (a backup disk not mounted yet, a read-only file system, a file
// in its place) is no reason for the control node not to serve: it is logged, and
// each backup tries it again.
func New(cfg Config) (*Writer, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = DefaultStopGrace
	}
	if cfg.Every <= 0 || cfg.Keep < 1 || cfg.Source == nil || cfg.Node == "" || len(cfg.CAPin) < MeshTagLen {
		return nil, errors.New("backup: an interval, a number to keep of at least 1, a source, a node and the mesh's CA pin are needed")
	}
	dir, err := Resolve(cfg.Dir, cfg.Data)
	if err != nil {
		return nil, fmt.Errorf("--backup-dir %s: %w", cfg.Dir, err)
	}
	cfg.Dir = dir
	w := &Writer{cfg: cfg, log: cfg.Logger.With("component", "backup"), tag: strings.ToLower(cfg.CAPin[:MeshTagLen]), soon: make(chan struct{}, 1)}
	if err := w.prepare(); err != nil {
		if errors.Is(err, datadir.ErrUnprotected) {
			return nil, err
		}
		w.log.Warn("the backup directory cannot be used now; this control node serves all the same, and each backup tries it again", "dir", dir, "err", err)
		return w, nil
	}
	if n := w.removeTemporary(); n > 0 {
		w.log.Info("removed the unfinished backups a stop or a failure left", "count", n, "dir", dir)
	}
	w.stats = w.newestStored()
	return w, nil
}

// newestStored is what the metrics say of the newest backup of this node already
// in the directory (zero when there is none): the last that succeeded. A restart
// takes none while it is younger than Config.Every (firstWait), and the age alert
// operations.md recommends read 0 and fired for up to an interval after every
// restart (a walkthrough). How long it took is not known.
func (w *Writer) newestStored() Stats {
	backups, err := w.list()
	if err != nil || len(backups) == 0 {
		return Stats{}
	}
	at, err := time.Parse(stampLayout, backups[0].at)
	if err != nil {
		return Stats{}
	}
	var size int64
	_ = filepath.WalkDir(filepath.Join(w.cfg.Dir, backups[0].name), func(_ string, e fs.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() {
			if fi, ierr := e.Info(); ierr == nil {
				size += fi.Size()
			}
		}
		return nil
	})
	return Stats{LastSuccess: at, LastSize: size}
}

// prepare makes the backup directory if it is missing, and judges it as serve
// judges a data directory: at start, and before each backup (a directory given
// to another user, or opened to others, while serve runs gets no more keys).
func (w *Writer) prepare() error {
	dir := w.cfg.Dir
	// Flushed into its parent: each backup's rename in it is flushed, its name not.
	if err := atomicfile.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("--backup-dir %s: %w", dir, err)
	}
	if err := datadir.CheckBackupPlace(dir); err != nil {
		return fmt.Errorf("--backup-dir %s: %w", dir, err)
	}
	return nil
}

// Dir is the backup directory, absolute.
func (w *Writer) Dir() string { return w.cfg.Dir }

// Stats returns how the writer's backups went.
func (w *Writer) Stats() Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stats
}

// Soon asks Run for a backup now, whatever the interval, for a change after which
// a backup from before it is no safe copy to restore (the declaration signing
// keyring rotated or retired: hosts follow it forward, never back; a revocation,
// which a restore would undo). Asks made while one waits are one: revocations
// that come while a backup is taken cost one more, and a script of a hundred runs
// of meshctl revoke takes backups one after the other while it lasts (bounded:
// only the newest of each interval is kept). The interval counts again from the
// backup. It never blocks.
func (w *Writer) Soon() {
	select {
	case w.soon <- struct{}{}:
	default:
	}
}

// Run takes a backup, then one every Config.Every, and one whenever Soon asks,
// until ctx ends, and returns ctx's error. The first is taken at once unless the newest backup of this node
// is younger than Config.Every: then when it is that old (a node restarted again
// and again took a backup at each start, and the newest Keep became copies of one
// state, the day's history removed; a review). A backup that fails is logged and
// counted, and the next one is taken at the next interval: it never stops the
// caller, and a stop waits for a backup under way at most Config.StopGrace.
func (w *Writer) Run(ctx context.Context) error {
	t := time.NewTimer(w.firstWait())
	defer t.Stop()
	for {
		asked := false
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		case <-w.soon:
			asked = true
		}
		// A backup asked for that fails is tried again soon, not at the next
		// interval: until then the only copies are of the state before the change.
		next := w.cfg.Every
		if asked {
			next = min(w.cfg.Every, MinEvery)
		}
		done := make(chan struct{})
		ok := false
		go func() {
			defer close(done)
			ok = w.takeLogged(ctx, next)
		}()
		select {
		case <-done:
		case <-ctx.Done():
			grace := time.NewTimer(w.cfg.StopGrace)
			select {
			case <-done:
				grace.Stop()
			case <-grace.C:
				w.log.Warn("a backup under way did not stop within "+w.cfg.StopGrace.String()+" of the stop: its file system does not answer (a hung network mount?); this control node stops without it, and its unfinished directory is removed when serve next starts",
					"dir", w.cfg.Dir)
				return ctx.Err()
			}
		}
		if ok {
			next = w.cfg.Every
		}
		t.Reset(next)
	}
}

// takeLogged takes one backup, logging and counting how it went, and reports
// whether it succeeded; retry is when the next is tried after a failure.
func (w *Writer) takeLogged(ctx context.Context, retry time.Duration) bool {
	b, err := w.Take(ctx)
	switch {
	case err == nil && b.Existing:
		w.log.Info("a backup of this state was written this second already; kept it", "path", b.Path, "index", b.Index)
	case err == nil:
		w.log.Info("backup written", "path", b.Path, "index", b.Index, "size", b.Size, "duration", b.Took.Round(time.Millisecond))
	case ctx.Err() != nil:
		// Stopping: the backup cut short is no failure of the backups.
		w.log.Info("backup stopped with the control node; its unfinished directory was removed", "dir", w.cfg.Dir)
	default:
		w.log.Warn("backup failed; this control node goes on serving and tries again in "+retry.String()+
			": make room in the backup directory, or give it back to the user serve runs as, as the error says (docs/operations.md, \"Backing up\")",
			"dir", w.cfg.Dir, "err", err)
	}
	return err == nil
}

// Take writes one backup and removes the backups of this node beyond the newest
// Config.Keep. On a failure nothing is left under a backup's name: the temporary
// directory is removed.
func (w *Writer) Take(ctx context.Context) (b Backup, err error) {
	defer func() {
		if err != nil && ctx.Err() == nil {
			w.mu.Lock()
			w.stats.Failures++
			w.mu.Unlock()
		}
	}()
	if err := w.prepare(); err != nil {
		return Backup{}, err
	}
	start := w.cfg.Now()
	stamp := start.UTC().Format(stampLayout)
	tmp, err := os.MkdirTemp(w.cfg.Dir, tempPrefix(w.cfg.Node, w.tag, stamp)+"*")
	if err != nil {
		return Backup{}, fmt.Errorf("make the backup's directory in %s: %w", w.cfg.Dir, err)
	}
	defer func() {
		if err != nil {
			if rerr := os.RemoveAll(tmp); rerr != nil {
				w.log.Warn("could not remove an unfinished backup; serve removes it when it next starts", "dir", tmp, "err", rerr)
			}
		}
	}()
	store, err := w.cfg.Source.BackUp(ctx, filepath.Join(tmp, datadir.RaftDir))
	if err != nil {
		return Backup{}, fmt.Errorf("back up the Raft store: %w", err)
	}
	// After the snapshot: a file the state refers to (a signing key the keyring
	// lists) is as new as the state or newer, never older.
	size, err := copyFiles(ctx, w.cfg.Data, tmp)
	if err != nil {
		return Backup{}, err
	}
	if err := atomicfile.SyncDir(tmp); err != nil {
		return Backup{}, fmt.Errorf("flush the backup %s: %w", tmp, err)
	}
	final := filepath.Join(w.cfg.Dir, Name(w.cfg.Node, w.tag, start, store.Index))
	if isBackup(final) {
		// Two asked for at once (a rotation and its retirement applied in one
		// batch): the same state, taken in the same second. Not a failure (it
		// was counted one, and logged as a full disk's: a review). Anything else
		// under the name is refused below, and left as it is.
		if err := os.RemoveAll(tmp); err != nil {
			w.log.Warn("could not remove an unfinished backup; serve removes it when it next starts", "dir", tmp, "err", err)
		}
		return Backup{Path: final, Index: store.Index, At: start, Existing: true}, nil
	}
	// os.Rename refuses an existing directory at final (rename(2) would replace
	// an empty one): an existing name is never replaced.
	if err := os.Rename(tmp, final); err != nil {
		return Backup{}, fmt.Errorf("name the backup: %w", err)
	}
	if err := atomicfile.SyncDir(w.cfg.Dir); err != nil {
		// The backup is whole, under its name, which a crash may lose.
		w.log.Warn("the backup directory could not be flushed; the new backup's name may not survive a crash", "dir", w.cfg.Dir, "err", err)
	}
	b = Backup{Path: final, Index: store.Index, Size: size + store.Size, Took: w.cfg.Now().Sub(start), At: start}
	w.mu.Lock()
	w.stats.LastSuccess, w.stats.LastSize, w.stats.LastDuration = start, b.Size, b.Took
	w.mu.Unlock()
	w.retain(filepath.Base(final))
	return b, nil
}

// isBackup reports whether dir holds what a backup writes: the Raft store and
// the mesh's configuration.
func isBackup(dir string) bool {
	for _, name := range []string{datadir.RaftDir, datadir.ConfigFile} {
		if _, err := os.Lstat(filepath.Join(dir, name)); err != nil {
			return false
		}
	}
	return true
}

// firstWait is how long Run waits before its first backup: until the newest
// backup of this node is Config.Every old, at once when there is none, when it is
// that old already, or when its time is ahead of the clock.
func (w *Writer) firstWait() time.Duration {
	backups, err := w.list()
	if err != nil || len(backups) == 0 {
		return 0
	}
	at, err := time.Parse(stampLayout, backups[0].at)
	if err != nil {
		return 0
	}
	age := w.cfg.Now().Sub(at)
	if age < 0 || age >= w.cfg.Every {
		return 0
	}
	return w.cfg.Every - age
}
