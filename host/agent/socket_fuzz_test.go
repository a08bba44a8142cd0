package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"
)

// FuzzSocketRequest: what a client writes on the agent's socket (one request line;
// `meshhost status` and `meshhost hooks retry` send theirs, anything else of the
// agent's user may send anything). For any bytes, the agent answers at most one
// JSON line and closes: a line that is "status" (spaces around it aside) gets the
// link status, one that is "hooks retry" reaches the loop and gets its outcome,
// any other line is refused as an unknown request without reaching the loop, and
// bytes with no end of line within the first 256 get no answer at all. Only a
// "hooks retry" line ever reaches the loop.
func FuzzSocketRequest(f *testing.F) {
	for _, s := range []string{
		"status\n", "hooks retry\n", "  status \r\n", "\thooks retry\t\n", "hooks  retry\n", "STATUS\n", "status", "status\nhooks retry\n",
		"\x00\x1b[2J rm -rf /\n", "", "\n", strings.Repeat("a", 255) + "\n", strings.Repeat("a", 256) + "\n", strings.Repeat(" ", 250) + "status\n",
		"hooks retry\x00\n", "\u00a0status\n", "status\u0085\n", "\xff\xfe\n",
	} {
		f.Add([]byte(s))
	}
	dir, err := os.MkdirTemp("", "mh")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { os.RemoveAll(dir) })
	fx := newFixtureIn(f, dir)
	ln, err := listenSocket(SocketPath(dir))
	if err != nil {
		f.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { defer close(served); fx.a.serveSocket(ctx, ln) }()
	var retries atomic.Int64
	go func() {
		for {
			select {
			case r := <-fx.a.hookRetries:
				retries.Add(1)
				r <- HooksOutcome{Nothing: true}
			case <-ctx.Done():
				return
			}
		}
	}()
	f.Cleanup(func() { cancel(); <-served })

	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := net.Dial("unix", SocketPath(dir))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		before := retries.Load()
		// Written whole and then ended; the agent may close before reading it all.
		c.Write(data)
		c.(*net.UnixConn).CloseWrite()
		answer, err := io.ReadAll(c)
		if err != nil && !strings.Contains(err.Error(), "connection reset") {
			t.Fatalf("reading the answer: %v", err)
		}
		reached := retries.Load() - before

		end := bytes.IndexByte(data, '\n')
		if end < 0 || end >= 256 {
			if len(answer) != 0 || reached != 0 {
				t.Fatalf("a request without an end of line in its first 256 bytes was answered %q (loop reached %d times)", answer, reached)
			}
			return
		}
		if n := bytes.Count(answer, []byte("\n")); n != 1 || answer[len(answer)-1] != '\n' || !utf8.Valid(answer) {
			t.Fatalf("answer %q is not one line", answer)
		}
		line := strings.TrimSpace(string(data[:end+1]))
		switch line {
		case RequestStatus:
			var st LinkStatus
			dec := json.NewDecoder(bytes.NewReader(answer))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&st); err != nil || reached != 0 {
				t.Fatalf("status answered %q (%v), loop reached %d times", answer, err, reached)
			}
		case RequestRetryHooks:
			var out HooksOutcome
			if err := json.Unmarshal(answer, &out); err != nil || !out.Nothing || reached != 1 {
				t.Fatalf("hooks retry answered %q (%v), loop reached %d times", answer, err, reached)
			}
		default:
			if string(answer) != `{"refused":"unknown request"}`+"\n" || reached != 0 {
				t.Fatalf("request %q answered %q, loop reached %d times", line, answer, reached)
			}
		}
	})
}

// FuzzCutAnswer: the failed hooks' output the socket answers with is cut to
// maxAnswerError on a rune boundary: never longer than that and its note, a prefix
// of the output, valid UTF-8 when the output is, and left whole when it fits.
func FuzzCutAnswer(f *testing.F) {
	f.Add("short", 0)
	f.Add("é", maxAnswerError-1)
	f.Add("😀", maxAnswerError-2)
	f.Add("\xff", maxAnswerError)
	f.Add("\x80\x80\x80", maxAnswerError+1)
	f.Fuzz(func(t *testing.T, tail string, pad int) {
		if pad < 0 || pad > maxAnswerError+8 || len(tail) > 64 {
			return
		}
		s := strings.Repeat("x", pad) + tail
		got := cutAnswer(s)
		if len(s) <= maxAnswerError {
			if got != s {
				t.Fatalf("an output of %d bytes was cut", len(s))
			}
			return
		}
		kept, note, ok := strings.Cut(got, " … (cut:")
		if !ok || len(kept) > maxAnswerError || !strings.HasPrefix(s, kept) || !strings.HasSuffix(note, ")") {
			t.Fatalf("output of %d bytes cut to %d bytes: %q…", len(s), len(got), got[max(0, len(got)-120):])
		}
		if utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Fatal("a valid UTF-8 output was cut inside a rune")
		}
	})
}
