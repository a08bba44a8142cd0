// Package logging holds what the libraries the control plane embeds need to log
// through slog: a limiter that bounds how often one kind of line repeats.
package logging

import (
	"context"
	"hash/maphash"
	"log/slog"
	"sync"
	"time"
)

// RepeatInterval is how often one kind of line may be logged: a peer that is down
// makes Raft and nats-server report the same failure several times a second.
const RepeatInterval = 10 * time.Second

// SuppressedKey is the attribute that carries how many lines of the same kind were
// left out since the last one logged.
const SuppressedKey = "suppressed"

// FullKey is the attribute, true, of a line let through past the bound on kinds:
// its SuppressedKey counts the lines of every kind past the bound, not of its own.
const FullKey = "limiter_full"

// maxKinds bounds the kinds a Limiter tracks. Kinds are the messages of the code that
// logs, so a few hundred at most; more means something puts what varies (a subject,
// a name) in the kind, and the lines past the bound share one allowance (see allow):
// logging them all would let whatever makes the kinds flood the log.
const maxKinds = 1024

// Limiter lets the first line of each kind through per interval (or the first few,
// LogFirst) and counts the others. A kind is a component and a message template: what
// stays the same from one repeat to the next (a message whose variable parts are
// attributes, as Raft logs; a line with its numbers folded, as nats-server's come),
// never the text with a peer's address or an attempt number in it, which would make
// every line a kind of its own. Only the lines it is asked about are limited; the
// caller decides which (warnings and errors, here). Its zero value is not usable; a
// nil *Limiter limits nothing.
type Limiter struct {
	every time.Duration
	now   func() time.Time
	seed  maphash.Seed

	mu    sync.Mutex
	kinds map[kind]*window
	// full is the one window of every kind that came past maxKinds.
	full window
}

// kind keeps a template by its hash, so that a kind costs the same few bytes however
// long its line: nats-server's lines run to kilobytes. Two templates with one hash
// would share a window, which only limits them more.
type kind struct {
	component string
	template  uint64
}

// window is one kind's interval: when it began, how many lines were let through in
// it and how many held back since the last one let through.
type window struct {
	start      time.Time
	logged     int
	suppressed int
}

// NewLimiter returns a limiter that lets one line of each kind through every interval,
// reading the time from now.
func NewLimiter(every time.Duration, now func() time.Time) *Limiter {
	return &Limiter{every: every, now: now, seed: maphash.MakeSeed(), kinds: map[kind]*window{}}
}

// Allow reports whether a line of this kind is logged now and, if it is, how many
// lines of the kind were suppressed since the last one that was: the count is then
// reported on this line (see Suppressed). A nil Limiter allows everything.
func (l *Limiter) Allow(component, template string) (ok bool, suppressed int) {
	ok, suppressed, _ = l.allow(component, template, 1)
	return ok, suppressed
}

// allow lets the first n lines of the kind through each interval. Past maxKinds, a new
// kind is not tracked: its lines count against one window shared by all such kinds,
// which lets one line through an interval (full is then true), so the bound on memory
// bounds the output too. No kind is forgotten while that window holds a count, so
// that the next new kind still comes past the bound and, once the interval has
// passed, reports the count: given room, it would start a window of its own, and the
// count would wait for a kind past the bound that may never come.
func (l *Limiter) allow(component, template string, n int) (ok bool, suppressed int, full bool) {
	if l == nil {
		return true, 0, false
	}
	now := l.now()
	k := kind{component, maphash.String(l.seed, template)}
	l.mu.Lock()
	defer l.mu.Unlock()
	if w, seen := l.kinds[k]; seen {
		ok, suppressed = w.allow(now, l.every, n)
		return ok, suppressed, false
	}
	if len(l.kinds) >= maxKinds && l.full.suppressed == 0 {
		l.forget(now)
	}
	if len(l.kinds) >= maxKinds {
		ok, suppressed = l.full.allow(now, l.every, 1)
		return ok, suppressed, true
	}
	l.kinds[k] = &window{start: now, logged: 1}
	return true, 0, false
}

// allow lets the first n lines of an interval through and counts the rest; the first
// line after the interval begins the next one and carries the count.
func (w *window) allow(now time.Time, every time.Duration, n int) (ok bool, suppressed int) {
	if now.Sub(w.start) < every {
		if w.logged < n {
			w.logged++
			return true, 0
		}
		w.suppressed++
		return false, 0
	}
	suppressed = w.suppressed
	*w = window{start: now, logged: 1}
	return true, suppressed
}

// forget drops the kinds whose interval has passed with nothing suppressed: the next
// line of such a kind would be logged anyway, with no count to report.
func (l *Limiter) forget(now time.Time) {
	for k, w := range l.kinds {
		if w.suppressed == 0 && now.Sub(w.start) >= l.every {
			delete(l.kinds, k)
		}
	}
}

// Log logs msg to log, unless a line of its kind was logged within the interval; a
// line that follows suppressed ones carries their count (SuppressedKey).
func (l *Limiter) Log(ctx context.Context, log *slog.Logger, level slog.Level, component, template, msg string, attrs ...slog.Attr) {
	l.LogFirst(ctx, log, level, 1, component, template, msg, attrs...)
}

// LogFirst is Log letting the first n lines of each interval through: for lines
// whose attributes are each worth seeing (what one client tried), a few of them in
// an interval say more than the first alone, and a few are still a bounded output.
func (l *Limiter) LogFirst(ctx context.Context, log *slog.Logger, level slog.Level, n int, component, template, msg string, attrs ...slog.Attr) {
	ok, suppressed, full := l.allow(component, template, n)
	if !ok {
		return
	}
	if suppressed > 0 {
		attrs = append(attrs, Suppressed(suppressed))
	}
	if full {
		attrs = append(attrs, slog.Bool(FullKey, true))
	}
	log.LogAttrs(ctx, level, msg, attrs...)
}

// Suppressed is the attribute a line that Allow let through carries when lines of its
// kind were suppressed before it.
func Suppressed(n int) slog.Attr { return slog.Int(SuppressedKey, n) }
