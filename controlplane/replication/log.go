package replication

import (
	"context"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"mesh/logging"
)

// slogger is an hclog.Logger over slog: each line Raft logs is one slog record at its
// own level, with hclog's key/value pairs as attributes and the logger's name as the
// component. Warnings and errors of one kind (name and message: Raft keeps the peer
// and the error in the pairs) are bounded by the limiter, with a count.
type slogger struct {
	base    *slog.Logger // without this logger's name and implied pairs
	out     *slog.Logger // base with both
	name    string
	implied []any
	level   *atomic.Int32 // an hclog.Level, shared with the loggers derived from this one
	repeats *logging.Limiter
}

var _ hclog.Logger = (*slogger)(nil)

// newSlogger returns an hclog.Logger named name that logs to log the lines at level
// and above that log's handler enables.
func newSlogger(log *slog.Logger, name string, level hclog.Level, repeats *logging.Limiter) *slogger {
	l := &slogger{base: log, name: name, level: new(atomic.Int32), repeats: repeats}
	l.level.Store(int32(level))
	l.out = l.derive()
	return l
}

// derive is base with the component and the implied pairs, computed once per logger
// so the handler can preformat them.
func (l *slogger) derive() *slog.Logger {
	var attrs []any
	if l.name != "" {
		attrs = append(attrs, slog.String("component", l.name))
	}
	for _, a := range pairs(l.implied) {
		attrs = append(attrs, a)
	}
	return l.base.With(attrs...)
}

func (l *slogger) clone() *slogger {
	c := *l
	c.implied = slices.Clone(l.implied)
	return &c
}

// slogLevel maps hclog's levels onto slog's: Trace is below Debug, by slog's steps of 4.
func slogLevel(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

func (l *slogger) enabled(level hclog.Level) bool {
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	floor := hclog.Level(l.level.Load())
	return level != hclog.Off && floor != hclog.Off && level >= floor && l.out.Enabled(context.Background(), slogLevel(level))
}

// peerUnreachable reports whether msg is one of the lines Raft logs at ERROR when
// it cannot reach a peer: a voter stopped for a rolling restart or an upgrade, an
// ordinary day, which `meshctl control status` already reports (each voter that does
// not answer). They are warnings here, so that an alert on ERROR is kept for what
// breaks this node.
func peerUnreachable(msg string) bool {
	switch msg {
	case "failed to appendEntries to", "failed to heartbeat to", "failed to start pipeline replication to",
		"failed to pipeline appendEntries", "failed to make requestVote RPC":
		return true
	}
	return false
}

// firstElection reports whether msg and args are Raft's line for the election a node
// starts when it has heard of no leader since it started: every start of a control
// node that is alone or whose peers have not spoken yet, an ordinary day. A node
// that lost the leader it had names it (last-leader-id) and keeps the warning; a node
// that cannot win an election warns again at each one ("Election timeout reached").
func firstElection(msg string, args []any) bool {
	if msg != "heartbeat timeout reached, starting election" {
		return false
	}
	for i := 0; i+1 < len(args); i += 2 {
		if args[i] == "last-leader-id" {
			return fmt.Sprint(args[i+1]) == "" // a raft.ServerID
		}
	}
	return false
}

// nothingNewToSnapshot reports whether msg and args are Raft's line for a snapshot
// it did not take because the state machine applied nothing since it started. After
// a snapshot was installed, or a restart, Raft's check compares the log's last index
// with the snapshot's, which wraps around when the log is shorter
// (hashicorp/raft snapshot.go, shouldSnapshot): it tries every interval, and an idle
// control node logged an ERROR every 10 s for nothing amiss.
func nothingNewToSnapshot(msg string, args []any) bool {
	if msg != "failed to take snapshot" {
		return false
	}
	for i := 0; i+1 < len(args); i += 2 {
		if err, ok := args[i+1].(error); ok && args[i] == "error" && errors.Is(err, raft.ErrNothingNewToSnapshot) {
			return true
		}
	}
	return false
}

// peerHungUp reports whether msg and args are Raft's line for an answer it could not
// send, or a request it could not read, because the peer closed the connection
// first (broken pipe, reset): a member
// removed, or restarted, as an RPC to it was under way, an ordinary day (a
// walkthrough met it at every control remove).
func peerHungUp(msg string, args []any) bool {
	if msg != "failed to flush response" && msg != "failed to decode incoming command" {
		return false
	}
	for i := 0; i+1 < len(args); i += 2 {
		if err, ok := args[i+1].(error); ok && args[i] == "error" && (errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)) {
			return true
		}
	}
	return false
}

// nonvoterElection is Raft's line for a member with no vote that lost contact with
// the leader: a nonvoter at every restart of the leader, an ordinary day (a
// walkthrough: a WARN at each rolling restart); a voter removed from the
// configuration says so too, and stops on its own.
const nonvoterElection = "not part of stable configuration, aborting election"

func (l *slogger) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Error && (peerUnreachable(msg) || peerHungUp(msg, args)) {
		level = hclog.Warn
	}
	if level == hclog.Error && nothingNewToSnapshot(msg, args) {
		level = hclog.Debug
	}
	if level == hclog.Warn && (firstElection(msg, args) || msg == nonvoterElection) {
		level = hclog.Info
	}
	if !l.enabled(level) {
		return
	}
	ctx := context.Background()
	if level >= hclog.Warn {
		l.repeats.Log(ctx, l.out, slogLevel(level), l.name, msg, msg, pairs(args)...)
		return
	}
	l.out.LogAttrs(ctx, slogLevel(level), msg, pairs(args)...)
}

func (l *slogger) Trace(msg string, args ...any) { l.Log(hclog.Trace, msg, args...) }
func (l *slogger) Debug(msg string, args ...any) { l.Log(hclog.Debug, msg, args...) }
func (l *slogger) Info(msg string, args ...any)  { l.Log(hclog.Info, msg, args...) }
func (l *slogger) Warn(msg string, args ...any)  { l.Log(hclog.Warn, msg, args...) }
func (l *slogger) Error(msg string, args ...any) { l.Log(hclog.Error, msg, args...) }

func (l *slogger) IsTrace() bool { return l.enabled(hclog.Trace) }
func (l *slogger) IsDebug() bool { return l.enabled(hclog.Debug) }
func (l *slogger) IsInfo() bool  { return l.enabled(hclog.Info) }
func (l *slogger) IsWarn() bool  { return l.enabled(hclog.Warn) }
func (l *slogger) IsError() bool { return l.enabled(hclog.Error) }

func (l *slogger) ImpliedArgs() []any { return slices.Clone(l.implied) }

// With returns a logger that adds the pairs to every line; a key given again takes
// the new value, as hclog's own logger does.
func (l *slogger) With(args ...any) hclog.Logger {
	c := l.clone()
	for i := 0; i < len(args); i += 2 {
		if i+1 == len(args) {
			c.implied = append(c.implied, hclog.MissingKey, args[i])
			break
		}
		key := keyString(args[i])
		if j := slices.IndexFunc(pairKeys(c.implied), func(k string) bool { return k == key }); j >= 0 {
			c.implied[2*j+1] = args[i+1]
			continue
		}
		c.implied = append(c.implied, key, args[i+1])
	}
	c.out = c.derive()
	return c
}

func pairKeys(implied []any) []string {
	keys := make([]string, 0, len(implied)/2)
	for i := 0; i+1 < len(implied); i += 2 {
		keys = append(keys, keyString(implied[i]))
	}
	return keys
}

func (l *slogger) Name() string { return l.name }

// Named returns a logger whose name is this one's followed by name, as hclog joins
// them ("raft.snapshot").
func (l *slogger) Named(name string) hclog.Logger {
	if l.name != "" {
		name = l.name + "." + name
	}
	return l.ResetNamed(name)
}

func (l *slogger) ResetNamed(name string) hclog.Logger {
	c := l.clone()
	c.name = name
	c.out = c.derive()
	return c
}

// SetLevel changes the level of this logger and of every logger derived from the same
// one.
func (l *slogger) SetLevel(level hclog.Level) { l.level.Store(int32(level)) }

func (l *slogger) GetLevel() hclog.Level { return hclog.Level(l.level.Load()) }

func (l *slogger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(l.StandardWriter(opts), "", 0)
}

// StandardWriter logs each write as one line at opts.ForceLevel, or at info. It does
// not infer a level from the text (opts.InferLevels): a level is never read out of
// the words of a line.
func (l *slogger) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	level := hclog.Info
	if opts != nil && opts.ForceLevel != hclog.NoLevel {
		level = opts.ForceLevel
	}
	return stdWriter{l: l, level: level}
}

type stdWriter struct {
	l     *slogger
	level hclog.Level
}

func (w stdWriter) Write(p []byte) (int, error) {
	w.l.Log(w.level, strings.TrimRight(string(p), " \t\r\n"))
	return len(p), nil
}

// pairs turns hclog's alternating keys and values into attributes, giving hclog's own
// value types (Format, Hex, Quote...) the rendering hclog gives them, and a value
// without a key hclog's MissingKey. A value slog renders itself is left to the handler
// (slog writes an error as its text); another Stringer is its String.
func pairs(args []any) []slog.Attr {
	if len(args) == 0 {
		return nil
	}
	attrs := make([]slog.Attr, 0, (len(args)+1)/2)
	for i := 0; i < len(args); i += 2 {
		if i+1 == len(args) {
			if _, ok := args[i].(hclog.CapturedStacktrace); ok {
				attrs = append(attrs, slog.String("stacktrace", fmt.Sprint(args[i])))
			} else {
				attrs = append(attrs, slog.Any(hclog.MissingKey, value(args[i])))
			}
			break
		}
		attrs = append(attrs, slog.Any(keyString(args[i]), value(args[i+1])))
	}
	return attrs
}

// keyString is hclog's key k in this product's log's words: "err" for hclog's
// "error", as every other line says it, and "_" between words (hclog writes
// "backoff time" and "last-leader-id"), so that one query finds a key in every
// line of every component.
func keyString(k any) string {
	s, ok := k.(string)
	if !ok {
		s = fmt.Sprint(k)
	}
	if s == "error" {
		return "err"
	}
	return strings.NewReplacer(" ", "_", "-", "_").Replace(s)
}

func value(v any) any {
	switch v := v.(type) {
	case hclog.Format:
		if len(v) == 0 {
			return ""
		}
		f, ok := v[0].(string)
		if !ok {
			return fmt.Sprint(v...)
		}
		return fmt.Sprintf(f, v[1:]...)
	case hclog.Hex:
		return "0x" + strconv.FormatInt(int64(v), 16)
	case hclog.Octal:
		return "0" + strconv.FormatInt(int64(v), 8)
	case hclog.Binary:
		return "0b" + strconv.FormatInt(int64(v), 2)
	case hclog.Quote:
		return strconv.Quote(string(v))
	case time.Duration, time.Time, error, json.Marshaler, encoding.TextMarshaler, slog.LogValuer:
		return v // slog renders these itself
	case fmt.Stringer:
		// Raft passes itself ("node", r): a struct with no exported field, which JSON
		// would write as {}, where hclog writes its String.
		return v.String()
	default:
		return v
	}
}
