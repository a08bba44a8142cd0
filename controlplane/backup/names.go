package backup

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"mesh/controlplane/datadir"
)

// stampLayout is the time in a backup's name: UTC, to the second.
const stampLayout = "20060102T150405Z"

// MeshTagLen is how many hex digits of the mesh CA's pin a backup's name holds:
// every mesh bootstrapped with the defaults names its first node cp-1, and two
// meshes backing up into one directory removed each other's backups (a review).
const MeshTagLen = 8

// Name is the name of node's backup, of the mesh whose CA pin begins with tag,
// taken at t of the state as of Raft index index: NODE-TAG-YYYYMMDDTHHMMSSZ-iINDEX,
// the time in UTC.
func Name(node, tag string, t time.Time, index uint64) string {
	return fmt.Sprintf("%s-%s-%s-i%d", node, tag, t.UTC().Format(stampLayout), index)
}

// tempPrefix begins the name of a backup of node (of the mesh tag) being written,
// taken at stamp, or of one being removed: hidden, and unlike any backup's name.
func tempPrefix(node, tag, stamp string) string {
	return ".tmp-" + node + "-" + tag + "-" + stamp + "-"
}

// namePattern matches the names of the backups of node of the mesh tag, and only
// those: another node whose id begins with node's and a dash ("cp" and "cp-1"),
// or another mesh's node of the same id, has names that do not match, the tag
// being hex digits and the time digits.
func namePattern(node, tag string) *regexp.Regexp {
	return regexp.MustCompile(`^` + regexp.QuoteMeta(node+"-"+tag) + `-([0-9]{8}T[0-9]{6}Z)-i([0-9]+)$`)
}

// tempPattern matches the names of node's backups being written or removed
// (tempPrefix).
func tempPattern(node, tag string) *regexp.Regexp {
	return regexp.MustCompile(`^\.tmp-` + regexp.QuoteMeta(node+"-"+tag) + `-[0-9]{8}T[0-9]{6}Z-[0-9a-z]+$`)
}

// ErrPlace means the backup directory named is one no backup may go in: the data
// directory itself, or inside its raft/, which Raft owns.
var ErrPlace = errors.New("not a place for backups")

// Resolve returns dir made absolute and clean, or ErrPlace when it is the data
// directory data or inside data's raft/ (the error does not name dir: the
// caller does).
func Resolve(dir string, data datadir.Dir) (string, error) {
	if dir == "" {
		return "", fmt.Errorf("%w: no backup directory given", ErrPlace)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	home, err := filepath.Abs(string(data))
	if err != nil {
		return "", err
	}
	raftDir := filepath.Join(home, datadir.RaftDir)
	for _, same := range []func(a, b string) bool{sameName, sameFile} {
		switch {
		case same(abs, home):
			return "", fmt.Errorf("%w: it is the data directory; give a directory of its own (backups in it would be copied with it)", ErrPlace)
		case same(abs, raftDir) || within(abs, raftDir, same):
			return "", fmt.Errorf("%w: it is inside the data directory's %s/, which Raft owns; give a directory outside it", ErrPlace, datadir.RaftDir)
		}
	}
	return abs, nil
}

// sameName reports whether two clean absolute paths are the same name.
func sameName(a, b string) bool { return a == b }

// sameFile reports whether two paths name the same existing directory, through
// links.
func sameFile(a, b string) bool {
	fa, err1 := os.Stat(a)
	fb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(fa, fb)
}

// within reports whether path is below dir: one of path's parents is dir as same
// judges it.
func within(path, dir string, same func(a, b string) bool) bool {
	for p := filepath.Dir(path); ; p = filepath.Dir(p) {
		if same(p, dir) {
			return true
		}
		if p == filepath.Dir(p) {
			return false
		}
	}
}

// stored is one of the node's backups found in the backup directory.
type stored struct {
	name  string
	at    string // its time, as its name says it: sorts as the time does
	index uint64
}

// list returns the node's backups in the backup directory, newest first (by
// time, then index).
func (w *Writer) list() ([]stored, error) {
	entries, err := os.ReadDir(w.cfg.Dir)
	if err != nil {
		return nil, err
	}
	pat := namePattern(w.cfg.Node, w.tag)
	var out []stored
	for _, e := range entries {
		m := pat.FindStringSubmatch(e.Name())
		if m == nil || !e.IsDir() {
			continue
		}
		index, err := strconv.ParseUint(m[2], 10, 64)
		if err != nil {
			continue
		}
		out = append(out, stored{name: e.Name(), at: m[1], index: index})
	}
	slices.SortFunc(out, func(a, b stored) int {
		if c := strings.Compare(b.at, a.at); c != 0 {
			return c
		}
		if a.index != b.index {
			if b.index > a.index {
				return 1
			}
			return -1
		}
		return strings.Compare(b.name, a.name)
	})
	return out, nil
}

// retain keeps the newest of the node's backups in each of the newest
// Config.Keep intervals of Config.Every (counted from the epoch, by the time in
// their names), and removes the others; never written, the one just written: with
// the clock set back, it sorts oldest by its name, and was removed at once, at
// every interval, while the log said it was written (a review). Backups a day of
// keyring changes asked for (Soon) so replace one another, and the interval's
// backup, within their interval, not the day's history: counted by number, a
// dozen rotations and retirements removed every backup from before them (a
// review). Interval backups, Config.Every apart, each have their own. Another
// node's backups, and anything else in the directory, are left alone. Each is
// renamed to a hidden name before it is removed, so that a removal cut short
// leaves no part of a backup under a backup's name (New removes it).
func (w *Writer) retain(written string) {
	backups, err := w.list()
	if err != nil {
		w.log.Warn("could not list the backups to remove the old ones", "dir", w.cfg.Dir, "err", err)
		return
	}
	backups = slices.DeleteFunc(backups, func(b stored) bool { return b.name == written })
	if len(backups) > 0 && w.newer(backups[0], written) {
		w.log.Warn("this machine's clock is behind the time of an earlier backup: the new backup is kept, and the older ones are removed by the time in their names, the one the clock passed last first; set the clock right",
			"newest_before", backups[0].name, "written", written)
	}
	kept := map[int64]bool{w.slot(written): true}
	var remove []stored
	for _, b := range backups {
		if slot := w.slot(b.name); len(kept) < w.cfg.Keep && !kept[slot] {
			kept[slot] = true
			continue
		}
		remove = append(remove, b)
	}
	for _, b := range remove {
		old := filepath.Join(w.cfg.Dir, b.name)
		gone := filepath.Join(w.cfg.Dir, tempPrefix(w.cfg.Node, w.tag, b.at)+"old")
		if err := os.Rename(old, gone); err != nil {
			w.log.Warn("could not remove an old backup", "path", old, "err", err)
			continue
		}
		if err := os.RemoveAll(gone); err != nil {
			w.log.Warn("could not remove an old backup; serve removes it when it next starts", "path", gone, "err", err)
		}
	}
}

// slot is the interval of Config.Every, from the epoch, the backup named name was
// taken in (by the time in its name); names it cannot read share the first.
func (w *Writer) slot(name string) int64 {
	m := namePattern(w.cfg.Node, w.tag).FindStringSubmatch(name)
	if m == nil {
		return math.MinInt64
	}
	at, err := time.Parse(stampLayout, m[1])
	if err != nil {
		return math.MinInt64
	}
	if w.cfg.Every%time.Second != 0 {
		return at.UnixNano() / int64(w.cfg.Every)
	}
	// Counted in seconds, and rounded down: in nanoseconds, a name past 2262 (or
	// before 1678) wrapped around int64, and fell in an interval before every
	// other; truncated toward zero, the intervals either side of the epoch were one.
	secs, every := at.Unix(), int64(w.cfg.Every/time.Second)
	slot := secs / every
	if secs%every < 0 {
		slot--
	}
	return slot
}

// newer reports whether the backup b's time, in its name, is past that of the
// backup named written.
func (w *Writer) newer(b stored, written string) bool {
	m := namePattern(w.cfg.Node, w.tag).FindStringSubmatch(written)
	return m != nil && b.at > m[1]
}

// removeTemporary removes the node's backups being written that a stop, a kill or
// a failure left, and returns how many. Only New calls it: with the data
// directory's lock held, no other process writes this node's backups.
func (w *Writer) removeTemporary() int {
	entries, err := os.ReadDir(w.cfg.Dir)
	if err != nil {
		return 0
	}
	pat := tempPattern(w.cfg.Node, w.tag)
	removed := 0
	for _, e := range entries {
		if !pat.MatchString(e.Name()) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(w.cfg.Dir, e.Name())); err != nil {
			w.log.Warn("could not remove an unfinished backup", "dir", filepath.Join(w.cfg.Dir, e.Name()), "err", err)
			continue
		}
		removed++
	}
	return removed
}
