package fleet

import (
	"bufio"
	"cmp"
	"context"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// LogCount is how often one message was logged at one level.
type LogCount struct {
	Level   string `json:"level"`
	Message string `json:"message"`
	Count   int64  `json:"count"`
}

// logTally counts log records by level and message.
type logTally struct {
	mu     sync.Mutex
	counts map[[2]string]int64
}

func (t *logTally) add(level, msg string) {
	t.mu.Lock()
	if t.counts == nil {
		t.counts = map[[2]string]int64{}
	}
	t.counts[[2]string{level, msg}]++
	t.mu.Unlock()
}

// list returns the counts, most frequent first.
func (t *logTally) list() []LogCount {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []LogCount
	for _, k := range slices.Collect(maps.Keys(t.counts)) {
		out = append(out, LogCount{Level: k[0], Message: k[1], Count: t.counts[k]})
	}
	slices.SortFunc(out, func(a, b LogCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Level, b.Level), cmp.Compare(a.Message, b.Message))
	})
	return out
}

// countingHandler passes records on to a handler and counts the warnings and errors
// by message, so that the report can say what the agents complained about.
type countingHandler struct {
	slog.Handler
	tally *logTally
}

func newCountingHandler(h slog.Handler) countingHandler {
	return countingHandler{Handler: h, tally: &logTally{}}
}

func (c countingHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		c.tally.add(r.Level.String(), r.Message)
	}
	return c.Handler.Handle(ctx, r)
}

func (c countingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return countingHandler{Handler: c.Handler.WithAttrs(as), tally: c.tally}
}

func (c countingHandler) WithGroup(name string) slog.Handler {
	return countingHandler{Handler: c.Handler.WithGroup(name), tally: c.tally}
}

// tallyServeLog counts the WARN and ERROR lines of serve's text log by message.
// The log is slog's text format, key=value with quoted values where needed.
func tallyServeLog(path string) ([]LogCount, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var t logTally
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		level := textField(line, "level")
		if level == "WARN" || level == "ERROR" {
			t.add(level, untimed(textField(line, "msg")))
		}
	}
	return t.list(), sc.Err()
}

// textField is the value of key in one line of slog's text format.
func textField(line, key string) string {
	i := strings.Index(line, " "+key+"=")
	if i < 0 {
		return ""
	}
	rest := line[i+len(key)+2:]
	if strings.HasPrefix(rest, `"`) {
		if s, err := strconv.QuotedPrefix(rest); err == nil {
			v, _ := strconv.Unquote(s)
			return v
		}
	}
	if j := strings.IndexByte(rest, ' '); j >= 0 {
		return rest[:j]
	}
	return rest
}

// untimed drops the timestamp a library's own log line (hclog's, through the
// adapter) starts with, so that its messages count together.
func untimed(msg string) string {
	if first, rest, ok := strings.Cut(msg, " "); ok && len(first) >= 20 && first[4] == '-' && first[10] == 'T' {
		return strings.TrimSpace(rest)
	}
	return msg
}
