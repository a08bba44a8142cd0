package broker

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"mesh/logging"
)

// logComponent names nats-server's lines in the log.
const logComponent = "broker"

// natsLog is nats-server's Logger over slog: each line is one record at its own level
// (notices are info), with the component. Warnings and errors that repeat are logged
// once an interval with a count (kindOf), so a route to an absent peer ("Error trying
// to connect to route (attempt %v): %v") is one line every ten seconds however its
// attempt number changes.
type natsLog struct {
	log *slog.Logger
	// debug is whether log is at debug: nats-server is then asked for its debug
	// lines, and its trace lines, should any come, are logged at debug.
	debug   bool
	repeats *logging.Limiter
}

func newNATSLog(log *slog.Logger, repeats *logging.Limiter) *natsLog {
	return &natsLog{
		log:     log.With(slog.String("component", logComponent)),
		debug:   log.Enabled(context.Background(), slog.LevelDebug),
		repeats: repeats,
	}
}

func (l *natsLog) Noticef(format string, v ...any) { l.emit(slog.LevelInfo, format, v) }
func (l *natsLog) Warnf(format string, v ...any)   { l.emit(slog.LevelWarn, format, v) }
func (l *natsLog) Errorf(format string, v ...any)  { l.emit(slog.LevelError, format, v) }
func (l *natsLog) Debugf(format string, v ...any)  { l.emit(slog.LevelDebug, format, v) }

// Fatalf is an error marked fatal: nats-server's own logger would exit the process,
// but the broker is embedded and the control node decides what a failure stops. It is
// never held back.
func (l *natsLog) Fatalf(format string, v ...any) {
	l.log.LogAttrs(context.Background(), slog.LevelError, fmt.Sprintf(format, v...), slog.Bool("fatal", true))
}

func (l *natsLog) Tracef(format string, v ...any) {
	if l.debug {
		l.emit(slog.LevelDebug, format, v, slog.Bool("trace", true))
	}
}

func (l *natsLog) emit(level slog.Level, format string, v []any, attrs ...slog.Attr) {
	ctx := context.Background()
	if !l.log.Enabled(ctx, level) {
		return
	}
	msg := fmt.Sprintf(format, v...)
	if level >= slog.LevelWarn {
		l.repeats.Log(ctx, l.log, level, logComponent, kindOf(msg), msg, attrs...)
		return
	}
	l.log.LogAttrs(ctx, level, msg, attrs...)
}

// kindOf is the kind of line the limiter counts repeats of: the line with its numbers
// folded. The format string alone is no kind here: nats-server bakes a connection into
// the format before it formats ("10.0.0.2:6222 - rid:17 - TLS route handshake error:
// %v"), passes some lines whole ("%s"), and passes as arguments what tells lines apart
// that must each be seen (the subject of a permissions violation). What changes from
// one retry to the next (attempt counts, ports, addresses, connection ids) is numbers.
//
// A line about one connection is that connection's kind, so that a permissions
// violation names each client that made one. Load signals (loadSignals) are the
// exception: a storm gives them for many connections at once, and they are one kind
// whatever the connection.
func kindOf(msg string) string {
	for _, sig := range loadSignals {
		if i := strings.Index(msg, sig); i >= 0 {
			return foldDigits(msg[i:])
		}
	}
	return foldDigits(msg)
}

// loadSignals are nats-server's warnings about one connection that say the broker is
// loaded rather than what the client did. 10,000 hosts reconnecting to a restarted
// control node made it log a readloop stall for each of 700–2,400 of them, one line
// each; as one kind they are a line every interval, with the count of the others.
var loadSignals = []string{" - Readloop processing time: ", " - Slow Consumer Detected"}

// foldDigits replaces each run of digits by one '#'.
func foldDigits(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	digits := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= '0' && c <= '9' {
			if !digits {
				b.WriteByte('#')
			}
			digits = true
			continue
		}
		digits = false
		b.WriteByte(c)
	}
	return b.String()
}
