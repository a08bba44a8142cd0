// Package logging holds what the libraries the control plane embeds need to log
// through slog: a limiter that bounds how often one kind of line repeats.
package logging

import (
	"context"
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

// maxKinds bounds the kinds a Limiter tracks. Kinds are the messages of the code that
// logs, so a few hundred at most; past the bound, lines are logged unlimited rather
// than dropped.
const maxKinds = 1024

// Limiter lets one line of each kind through per interval and counts the others. A
// kind is a component and a message template: what stays the same from one repeat to
// the next (a message whose variable parts are attributes, as Raft logs; a line with
// its numbers folded, as nats-server's come), never the text with a peer's address or
// an attempt number in it, which would make every line a kind of its own. Only the
// lines it is asked about are limited; the caller decides which (warnings and errors,
// here). Its zero value is not usable; a nil *Limiter limits nothing.
type Limiter struct {
	every time.Duration
	now   func() time.Time

	mu    sync.Mutex
	kinds map[kind]*window
}

type kind struct{ component, template string }

type window struct {
	start      time.Time
	suppressed int
}

// NewLimiter returns a limiter that lets one line of each kind through every interval,
// reading the time from now.
func NewLimiter(every time.Duration, now func() time.Time) *Limiter {
	return &Limiter{every: every, now: now, kinds: map[kind]*window{}}
}

// Allow reports whether a line of this kind is logged now and, if it is, how many
// lines of the kind were suppressed since the last one that was: the count is then
// reported on this line (see Suppressed). A nil Limiter allows everything.
func (l *Limiter) Allow(component, template string) (ok bool, suppressed int) {
	if l == nil {
		return true, 0
	}
	now := l.now()
	k := kind{component, template}
	l.mu.Lock()
	defer l.mu.Unlock()
	w, seen := l.kinds[k]
	if seen && now.Sub(w.start) < l.every {
		w.suppressed++
		return false, 0
	}
	if seen {
		n := w.suppressed
		w.start, w.suppressed = now, 0
		return true, n
	}
	if len(l.kinds) >= maxKinds {
		l.forget(now)
		if len(l.kinds) >= maxKinds {
			return true, 0
		}
	}
	l.kinds[k] = &window{start: now}
	return true, 0
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
	ok, n := l.Allow(component, template)
	if !ok {
		return
	}
	if n > 0 {
		attrs = append(attrs, Suppressed(n))
	}
	log.LogAttrs(ctx, level, msg, attrs...)
}

// Suppressed is the attribute a line that Allow let through carries when lines of its
// kind were suppressed before it.
func Suppressed(n int) slog.Attr { return slog.Int(SuppressedKey, n) }
