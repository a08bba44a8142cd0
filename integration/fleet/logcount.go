package fleet

import (
	"context"
	"log/slog"
	"sync/atomic"
)

// countingHandler passes records on to a handler and counts the warnings and errors,
// so that each phase can say how many the agents logged.
type countingHandler struct {
	slog.Handler
	warnings, errors *atomic.Int64
}

func newCountingHandler(h slog.Handler) countingHandler {
	return countingHandler{Handler: h, warnings: new(atomic.Int64), errors: new(atomic.Int64)}
}

func (c countingHandler) Handle(ctx context.Context, r slog.Record) error {
	switch {
	case r.Level >= slog.LevelError:
		c.errors.Add(1)
	case r.Level >= slog.LevelWarn:
		c.warnings.Add(1)
	}
	return c.Handler.Handle(ctx, r)
}

func (c countingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return countingHandler{Handler: c.Handler.WithAttrs(as), warnings: c.warnings, errors: c.errors}
}

func (c countingHandler) WithGroup(name string) slog.Handler {
	return countingHandler{Handler: c.Handler.WithGroup(name), warnings: c.warnings, errors: c.errors}
}

// counts returns the warnings and errors logged so far.
func (c countingHandler) counts() (warnings, errors int64) {
	return c.warnings.Load(), c.errors.Load()
}
