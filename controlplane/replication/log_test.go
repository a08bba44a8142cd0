package replication

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"mesh/logging"
)

// records decodes the JSON handler's output: one object a line, every line.
func records(t *testing.T, out *bytes.Buffer) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for line := range strings.Lines(out.String()) {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("a log line is not one JSON object: %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	return recs
}

func jsonLogger(out *bytes.Buffer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewJSONHandler(out, &slog.HandlerOptions{Level: level}))
}

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// TestSloggerLevels: every hclog level lands at its own slog level, and the logger's
// own level and the handler's both filter.
func TestSloggerLevels(t *testing.T) {
	var out bytes.Buffer
	l := newSlogger(jsonLogger(&out, slog.LevelDebug-4), "raft", hclog.Trace, nil)
	l.Trace("t")
	l.Debug("d")
	l.Info("i")
	l.Warn("w")
	l.Error("e")
	l.Log(hclog.NoLevel, "n")
	l.Log(hclog.Off, "off")
	want := map[string]string{"t": "DEBUG-4", "d": "DEBUG", "i": "INFO", "w": "WARN", "e": "ERROR", "n": "INFO"}
	recs := records(t, &out)
	if len(recs) != len(want) {
		t.Fatalf("%d lines, want %d: %v", len(recs), len(want), recs)
	}
	for _, r := range recs {
		if r["level"] != want[r["msg"].(string)] || r["component"] != "raft" {
			t.Errorf("line %v: want level %s, component raft", r, want[r["msg"].(string)])
		}
	}

	out.Reset()
	l.SetLevel(hclog.Warn)
	if l.IsInfo() || !l.IsWarn() || l.GetLevel() != hclog.Warn {
		t.Errorf("after SetLevel(Warn): IsInfo %v IsWarn %v GetLevel %v", l.IsInfo(), l.IsWarn(), l.GetLevel())
	}
	l.Info("dropped")
	l.Warn("kept")
	if recs := records(t, &out); len(recs) != 1 || recs[0]["msg"] != "kept" {
		t.Errorf("at warn: %v", recs)
	}

	// The handler's level filters too.
	out.Reset()
	h := newSlogger(jsonLogger(&out, slog.LevelWarn), "raft", hclog.Trace, nil)
	if h.IsDebug() || h.IsInfo() || !h.IsError() {
		t.Errorf("a warn handler: IsDebug %v IsInfo %v IsError %v", h.IsDebug(), h.IsInfo(), h.IsError())
	}
	h.Info("dropped")
	if out.Len() != 0 {
		t.Errorf("a line below the handler's level was written: %s", out.String())
	}
}

// opaque is like *raft.Raft as a value: no exported field, a String.
type opaque struct{ id string }

func (o opaque) String() string { return "Node at " + o.id }

// TestSloggerArgs: hclog's pairs are attributes, with hclog's value types rendered as
// hclog renders them, errors as their text and other Stringers as their String; its
// keys in the product's words (err, words joined by _: audit of fleet observability,
// finding 11).
func TestSloggerArgs(t *testing.T) {
	var out bytes.Buffer
	l := newSlogger(jsonLogger(&out, slog.LevelDebug), "raft", hclog.Debug, nil)
	l.Error("failed to send snapshot to", "peer", "10.0.0.2:7301", "backoff time", 40*time.Millisecond,
		"error", errors.New("dial tcp 10.0.0.2:7301: connect: connection refused"),
		"term", 7, "hex", hclog.Hex(255), "fmt", hclog.Format{"%d entries", 3}, "node", opaque{"cp-1"}, "lonely")
	recs := records(t, &out)
	if len(recs) != 1 {
		t.Fatalf("%d lines", len(recs))
	}
	r := recs[0]
	for k, v := range map[string]any{
		"msg": "failed to send snapshot to", "level": "ERROR", "peer": "10.0.0.2:7301", "backoff_time": float64(40 * time.Millisecond),
		"err": "dial tcp 10.0.0.2:7301: connect: connection refused", "term": float64(7), "hex": "0xff", "fmt": "3 entries",
		"node": "Node at cp-1", hclog.MissingKey: "lonely",
	} {
		if r[k] != v {
			t.Errorf("%s = %#v, want %#v (line %v)", k, r[k], v, r)
		}
	}
}

// TestSloggerWithNamed: With adds pairs to every line (a key given again takes the new
// value), Named appends to the name, ResetNamed replaces it, and loggers derived from
// one share its level.
func TestSloggerWithNamed(t *testing.T) {
	var out bytes.Buffer
	root := newSlogger(jsonLogger(&out, slog.LevelDebug), "raft", hclog.Debug, nil)
	w := root.With("node", "cp-1", "term", 1).With("term", 2)
	if got := w.ImpliedArgs(); len(got) != 4 || got[0] != "node" || got[3] != 2 {
		t.Errorf("ImpliedArgs = %v", got)
	}
	snap := w.Named("snapshot")
	other := snap.ResetNamed("transport")
	if snap.Name() != "raft.snapshot" || other.Name() != "transport" || root.Name() != "raft" {
		t.Errorf("names %q %q %q", snap.Name(), other.Name(), root.Name())
	}
	snap.Info("starting snapshot", "index", 10)
	other.Info("x")
	root.Info("plain")
	recs := records(t, &out)
	if len(recs) != 3 {
		t.Fatalf("%d lines: %v", len(recs), recs)
	}
	if r := recs[0]; r["component"] != "raft.snapshot" || r["node"] != "cp-1" || r["term"] != float64(2) || r["index"] != float64(10) {
		t.Errorf("named line %v", r)
	}
	if r := recs[1]; r["component"] != "transport" || r["node"] != "cp-1" {
		t.Errorf("reset-named line %v", r)
	}
	if r := recs[2]; r["node"] != nil || r["component"] != "raft" {
		t.Errorf("the root logger took a derived logger's pairs: %v", r)
	}
	if strings.Count(out.String(), `"component"`) != 3 {
		t.Errorf("a component key is repeated in a line:\n%s", out.String())
	}

	snap.SetLevel(hclog.Error)
	if root.IsWarn() || other.IsWarn() {
		t.Error("SetLevel on a derived logger did not reach the others")
	}

	out.Reset()
	std := root.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Error})
	std.Printf("[WARN] from the standard library")
	if recs := records(t, &out); len(recs) != 1 || recs[0]["level"] != "ERROR" || recs[0]["msg"] != "[WARN] from the standard library" {
		t.Errorf("standard logger line %v", recs)
	}
}

// TestSloggerRepeats: an error or warning that repeats is logged once an interval per
// name and message, whatever its pairs (the peer's address), with the count of those
// held back on the next one; other levels are not limited.
func TestSloggerRepeats(t *testing.T) {
	var out bytes.Buffer
	c := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	l := newSlogger(jsonLogger(&out, slog.LevelDebug), "raft", hclog.Debug, logging.NewLimiter(10*time.Second, c.now))
	for i := range 50 {
		l.Error("failed to heartbeat to", "peer", "10.0.0.2:7301", "attempt", i)
		l.Error("failed to appendEntries to", "peer", "10.0.0.3:7301")
		l.Named("snapshot").Error("failed to appendEntries to")
		l.Info("pipelining replication", "peer", i)
		c.t = c.t.Add(100 * time.Millisecond) // 5 s in all
	}
	c.t = c.t.Add(5 * time.Second)
	l.Error("failed to heartbeat to", "peer", "10.0.0.4:7301")

	count := map[string]int{}
	var last map[string]any
	for _, r := range records(t, &out) {
		count[r["component"].(string)+": "+r["msg"].(string)]++
		if r["msg"] == "failed to heartbeat to" {
			last = r
		}
	}
	want := map[string]int{"raft: failed to heartbeat to": 2, "raft: failed to appendEntries to": 1, "raft.snapshot: failed to appendEntries to": 1, "raft: pipelining replication": 50}
	for k, n := range want {
		if count[k] != n {
			t.Errorf("%q logged %d times, want %d (all: %v)", k, count[k], n, count)
		}
	}
	if last[logging.SuppressedKey] != float64(49) || last["peer"] != "10.0.0.4:7301" {
		t.Errorf("the line after the interval is %v, want %s=49 and its own peer", last, logging.SuppressedKey)
	}
}

// TestAPeerDownIsAWarning: the lines Raft logs at ERROR when it cannot reach a peer
// (a voter stopped for a rolling restart) are warnings, and every other ERROR stays
// one. The messages are the library's own: each is checked against the source of
// the hashicorp/raft this module builds with, so a release that rewords one fails
// here instead of turning it back into an error unnoticed.
func TestAPeerDownIsAWarning(t *testing.T) {
	var out bytes.Buffer
	l := newSlogger(jsonLogger(&out, slog.LevelDebug), "raft", hclog.Debug, logging.NewLimiter(10*time.Second, time.Now))
	down := []string{"failed to appendEntries to", "failed to heartbeat to", "failed to start pipeline replication to",
		"failed to pipeline appendEntries", "failed to make requestVote RPC"}
	for _, msg := range down {
		l.Error(msg, "peer", "cp-2", "error", errors.New("dial tcp 127.0.0.1:7001: connect: connection refused"))
	}
	l.Error("failed to commit logs", "error", errors.New("no space left on device"))
	recs := records(t, &out)
	if len(recs) != len(down)+1 {
		t.Fatalf("%d lines, want %d: %v", len(recs), len(down)+1, recs)
	}
	for _, r := range recs[:len(down)] {
		if r["level"] != "WARN" {
			t.Errorf("%q logged at %v, want WARN", r["msg"], r["level"])
		}
	}
	if last := recs[len(down)]; last["level"] != "ERROR" {
		t.Errorf("%q logged at %v, want ERROR", last["msg"], last["level"])
	}

	src := raftSource(t)
	for _, msg := range down {
		if !strings.Contains(src, `logger.Error("`+msg+`"`) {
			t.Errorf("hashicorp/raft no longer logs %q at ERROR: update peerUnreachable", msg)
		}
	}
}

// raftSource is the Go source of the hashicorp/raft this module builds with, joined.
func raftSource(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/hashicorp/raft").Output()
	if err != nil {
		t.Skipf("cannot locate hashicorp/raft's source (go list -m: %v)", err)
	}
	files, err := filepath.Glob(filepath.Join(strings.TrimSpace(string(out)), "*.go"))
	if err != nil || len(files) == 0 {
		t.Skipf("no Go source in hashicorp/raft's module directory: %v", err)
	}
	var all strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all.Write(b)
	}
	return all.String()
}

// TestAFirstElectionIsNotAWarning: the election a node starts having heard of no
// leader since it started (every start of a lone control node) is logged at info, so
// not at all below debug; one a node starts after losing the leader it had stays a
// warning. The line is checked against hashicorp/raft's source.
func TestAFirstElectionIsNotAWarning(t *testing.T) {
	const msg = "heartbeat timeout reached, starting election"
	for _, tc := range []struct {
		leader raft.ServerID
		want   string
	}{{"", "INFO"}, {"cp-2", "WARN"}} {
		var out bytes.Buffer
		l := newSlogger(jsonLogger(&out, slog.LevelDebug), "raft", hclog.Debug, logging.NewLimiter(10*time.Second, time.Now))
		l.Warn(msg, "last-leader-addr", raft.ServerAddress(""), "last-leader-id", tc.leader)
		recs := records(t, &out)
		if len(recs) != 1 || recs[0]["level"] != tc.want {
			t.Errorf("last leader %q: %v, want one line at %s", tc.leader, recs, tc.want)
		}
		out.Reset()
		atWarn := newSlogger(jsonLogger(&out, slog.LevelInfo), "raft", hclog.Warn, logging.NewLimiter(10*time.Second, time.Now))
		atWarn.Warn(msg, "last-leader-addr", raft.ServerAddress(""), "last-leader-id", tc.leader)
		if got := len(records(t, &out)); (got == 1) != (tc.want == "WARN") {
			t.Errorf("last leader %q, Raft's lines from WARN up: %d lines", tc.leader, got)
		}
	}
	if src := raftSource(t); !strings.Contains(src, `r.logger.Warn("`+msg+`", "last-leader-addr", lastLeaderAddr, "last-leader-id", lastLeaderID)`) {
		t.Errorf("hashicorp/raft no longer logs %q with last-leader-id at WARN: update firstElection", msg)
	}
}

// TestNothingNewToSnapshotIsNotAnError: Raft's snapshot that it did not take because
// nothing was applied since the start (every interval on an idle node that restarted
// or installed a snapshot) is logged at debug; any other failure to take a snapshot
// stays an error. The line is checked against hashicorp/raft's source.
func TestNothingNewToSnapshotIsNotAnError(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{{raft.ErrNothingNewToSnapshot, 0}, {errors.New("failed to create snapshot: no space left on device"), 1}} {
		var out bytes.Buffer
		l := newSlogger(jsonLogger(&out, slog.LevelInfo), "raft", hclog.Info, logging.NewLimiter(10*time.Second, time.Now))
		l.Error("failed to take snapshot", "error", tc.err)
		if recs := records(t, &out); len(recs) != tc.want || tc.want == 1 && recs[0]["level"] != "ERROR" {
			t.Errorf("%v: %v, want %d error line(s)", tc.err, recs, tc.want)
		}
	}
	if src := raftSource(t); !strings.Contains(src, `r.logger.Error("failed to take snapshot", "error", err)`) || !strings.Contains(src, `req.respond(ErrNothingNewToSnapshot)`) {
		t.Error("hashicorp/raft no longer logs a snapshot not taken as it did: update nothingNewToSnapshot")
	}
}

// TestAPeerThatHungUpIsAWarning (a walkthrough): Raft's answer it could not send
// because the peer closed the connection first (a member removed or restarted as
// an RPC was under way) was an ERROR at every control remove. A broken pipe or a
// reset is a warning; any other failure to send stays an error. The line is checked
// against hashicorp/raft's source.
func TestAPeerThatHungUpIsAWarning(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}, "WARN"},
		{&net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.ECONNRESET)}, "WARN"},
		{errors.New("tls: use of closed connection"), "ERROR"},
	} {
		var out bytes.Buffer
		l := newSlogger(jsonLogger(&out, slog.LevelInfo), "raft", hclog.Info, logging.NewLimiter(10*time.Second, time.Now))
		l.Error("failed to flush response", "error", tc.err)
		l.Error("failed to decode incoming command", "error", tc.err)
		if recs := records(t, &out); len(recs) != 2 || recs[0]["level"] != tc.want || recs[1]["level"] != tc.want {
			t.Errorf("%v: %v, want two %s lines", tc.err, recs, tc.want)
		}
	}
	if src := raftSource(t); !strings.Contains(src, `n.logger.Error("failed to flush response", "error", err)`) ||
		!strings.Contains(src, `n.logger.Error("failed to decode incoming command", "error", err)`) {
		t.Error("hashicorp/raft no longer logs an answer it could not send as it did: update peerHungUp")
	}
}

// TestANonvoterLosingTheLeaderIsInfo (a walkthrough): a nonvoter that lost contact
// with the leader (every restart of the leader) logged a WARN that it is not part of
// a stable configuration; it is info. The line is checked against hashicorp/raft's
// source.
func TestANonvoterLosingTheLeaderIsInfo(t *testing.T) {
	var out bytes.Buffer
	l := newSlogger(jsonLogger(&out, slog.LevelInfo), "raft", hclog.Info, logging.NewLimiter(10*time.Second, time.Now))
	l.Warn(nonvoterElection)
	if recs := records(t, &out); len(recs) != 1 || recs[0]["level"] != "INFO" {
		t.Fatalf("%v, want one INFO line", recs)
	}
	if src := raftSource(t); !strings.Contains(src, `r.logger.Warn("`+nonvoterElection+`")`) {
		t.Error("hashicorp/raft no longer logs a member without a vote losing the leader as it did: update nonvoterElection")
	}
}
