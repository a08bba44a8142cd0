package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// socketDir is a directory short enough for a socket's path (107 bytes at most;
// t.TempDir's can be longer).
func socketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// serveTestSocket serves the agent's socket at dir, and plays the loop's part with
// answer, until the test ends. It returns the channel closed once serveSocket has
// returned, and the function that stops it.
func serveTestSocket(t *testing.T, a *Agent, dir string, answer func(chan<- HooksOutcome)) (done <-chan struct{}, stop func()) {
	t.Helper()
	ln, err := listenSocket(SocketPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { defer close(served); a.serveSocket(ctx, ln) }()
	go func() {
		for {
			select {
			case r := <-a.hookRetries:
				answer(r)
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-served:
		case <-time.After(10 * time.Second):
			t.Error("the agent's socket still serves 10 s after the agent stopped")
		}
	})
	return served, cancel
}

// TestSocketClientThatNeverReadsDoesNotHoldTheAgent: a client that asks for a retry
// and never reads the answer (larger than the socket's buffer here) does not keep
// the agent from stopping. Before, the answer's write had no deadline and the
// agent's Run waited for it for ever on SIGTERM.
func TestSocketClientThatNeverReadsDoesNotHoldTheAgent(t *testing.T) {
	dir := socketDir(t)
	f := newFixtureIn(t, dir)
	big := HooksOutcome{Failed: []string{"h"}, Error: strings.Repeat("x", 16<<20)}
	served, stop := serveTestSocket(t, f.a, dir, func(r chan<- HooksOutcome) { r <- big })
	c, err := net.Dial("unix", SocketPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(RequestRetryHooks + "\n")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the answer is being written, and blocks
	stop()
	select {
	case <-served:
	case <-time.After(3 * time.Second):
		t.Fatal("the agent's socket still serves 3 s after the agent was asked to stop, held by a client that does not read")
	}
}

// TestSocketInputIsBounded: a request line over 256 bytes, a line without end, a
// client that sends nothing, and garbage, each cost the agent a bounded read; none
// of them reaches the loop, and a retry asked meanwhile is answered at once.
func TestSocketInputIsBounded(t *testing.T) {
	dir := socketDir(t)
	f := newFixtureIn(t, dir)
	asked := make(chan struct{}, 16)
	serveTestSocket(t, f.a, dir, func(r chan<- HooksOutcome) { asked <- struct{}{}; r <- HooksOutcome{Nothing: true} })
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("unix", SocketPath(dir))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// Held open, sending nothing.
	for range 20 {
		dial()
	}
	// A line without end: the agent stops reading after 256 bytes and closes.
	huge := dial()
	go huge.Write(make([]byte, 1<<20))
	huge.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := bufio.NewReader(huge).Read(make([]byte, 1)); n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a request line without end: read %d bytes, %v; want the connection closed at once", n, err)
	}
	// Garbage is told so and never reaches the loop.
	g := dial()
	g.Write([]byte("\x00\x1b[2J rm -rf /\n"))
	g.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, _ := bufio.NewReader(g).ReadString('\n')
	if !strings.Contains(line, `"refused":"unknown request"`) {
		t.Fatalf("garbage answered %q, want a refusal", line)
	}
	select {
	case <-asked:
		t.Fatal("a request that is not a retry reached the agent's loop")
	default:
	}
	// With 20 silent clients held open, a retry is answered at once.
	start := time.Now()
	out, err := RetryHooks(dir, 10*time.Second)
	if err != nil || !out.Nothing {
		t.Fatalf("retry beside silent clients: %+v, %v", out, err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("retry beside silent clients took %s", d)
	}
}

// TestSocketPathHazards: what is found at the socket's path when the agent starts.
// A socket a killed agent left is replaced; a regular file, a directory or a link
// (to a file or to a live socket) is refused and left as it is, never followed or
// removed.
func TestSocketPathHazards(t *testing.T) {
	t.Run("stale socket", func(t *testing.T) {
		dir := socketDir(t)
		p := SocketPath(dir)
		old, err := net.Listen("unix", p)
		if err != nil {
			t.Fatal(err)
		}
		old.(*net.UnixListener).SetUnlinkOnClose(false)
		old.Close() // as a SIGKILL leaves it: the file, nobody listening
		ln, err := listenSocket(p)
		if err != nil {
			t.Fatalf("a stale socket: %v, want it replaced", err)
		}
		defer ln.Close()
		if fi, err := os.Lstat(p); err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
			t.Fatalf("socket after replacing a stale one: %v, %v", fi.Mode(), err)
		}
	})
	for _, tc := range []struct {
		name string
		make func(t *testing.T, dir, p string)
	}{
		{"regular file", func(t *testing.T, dir, p string) { os.WriteFile(p, []byte("keep"), 0o600) }},
		{"directory", func(t *testing.T, dir, p string) { os.Mkdir(p, 0o700) }},
		{"link to a file", func(t *testing.T, dir, p string) {
			target := filepath.Join(dir, "target")
			os.WriteFile(target, []byte("keep"), 0o644)
			os.Symlink(target, p)
		}},
		{"link to a live socket", func(t *testing.T, dir, p string) {
			other := filepath.Join(dir, "other.sock")
			ln, err := net.Listen("unix", other)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			os.Symlink(other, p)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := socketDir(t)
			p := SocketPath(dir)
			tc.make(t, dir, p)
			before, err := os.Lstat(p)
			if err != nil {
				t.Fatal(err)
			}
			if ln, err := listenSocket(p); err == nil {
				ln.Close()
				t.Fatalf("listenSocket over a %s succeeded", tc.name)
			} else if !strings.Contains(err.Error(), "not a socket") {
				t.Fatalf("listenSocket over a %s: %v, want it named as not a socket", tc.name, err)
			}
			after, err := os.Lstat(p)
			if err != nil || after.Mode() != before.Mode() || !os.SameFile(before, after) {
				t.Fatalf("the %s at the socket's path was changed: %v, %v", tc.name, after, err)
			}
			for _, target := range []string{"target", "other.sock"} {
				if fi, err := os.Lstat(filepath.Join(dir, target)); err == nil && fi.Mode().Type() == 0 && fi.Mode().Perm() != 0o644 {
					t.Fatalf("a link's target was changed: %v", fi.Mode())
				}
			}
		})
	}
}

// TestRetryAnswerOfManyFailedHooks: twenty hooks that fail for the same file, each
// printing its most (4 KiB kept), are all reported by `meshhost hooks retry`, failed
// by name. Before, the agent's answer (over 80 KiB) passed the client's 64 KiB cap,
// and the command said "the agent's answer: request too long" though the hooks ran.
func TestRetryAnswerOfManyFailedHooks(t *testing.T) {
	dir := socketDir(t)
	f := newFixtureIn(t, dir)
	var list []any
	for i := range 20 {
		list = append(list, map[string]any{"name": fmt.Sprintf("hook-%02d", i), "paths": []string{"etc/*"},
			"run": []string{"sh", "-c", `head -c 6000 /dev/zero | tr '\0' x; exit 1`}})
	}
	cfg := loadHooks(t, map[string]any{"hooks": list})
	a := f.withHooks(t, cfg)
	if err := a.handle(context.Background(), f.decl(t, 1, "x")); err != nil {
		t.Fatal(err)
	}
	serveTestSocket(t, a, dir, a.retryHooks)
	out, err := RetryHooks(dir, 30*time.Second)
	if err != nil {
		t.Fatalf("retry of 20 failing hooks: %v", err)
	}
	if len(out.Failed) != 20 || out.Failed[19] != "hook-19" || !strings.Contains(out.Error, "hook hook-00") {
		t.Fatalf("retry of 20 failing hooks: failed %v, error of %d bytes", out.Failed, len(out.Error))
	}
}

// TestSocketAnswersStatus: the socket tells meshhost status whether the agent
// reaches the mesh, since when and why not, without the loop; an agent from before
// the request refuses it, which the client tells apart (ErrOlderAgent).
func TestSocketAnswersStatus(t *testing.T) {
	f := newFixture(t)
	dir := socketDir(t)
	f.a.stats.set(func(s *stats) { s.since, s.linkErr = t0, "dial tcp 127.0.0.1:1: connect: connection refused" })
	serveTestSocket(t, f.a, dir, func(chan<- HooksOutcome) { t.Error("a status request reached the loop") })
	st, err := AskStatus(dir, 5*time.Second)
	if err != nil || st.Connected || st.Synced || !st.Since.Equal(t0) || !strings.Contains(st.Error, "connection refused") {
		t.Fatalf("status not connected: %+v, %v", st, err)
	}
	// Connected, and the control plane does not answer the sync (no quorum).
	f.a.stats.set(func(s *stats) {
		s.connected, s.broker, s.linkErr = true, "tls://127.0.0.1:7300", "sync not answered: nats: timeout"
	})
	if st, err := AskStatus(dir, 5*time.Second); err != nil || !st.Connected || st.Synced || st.Error != "sync not answered: nats: timeout" {
		t.Fatalf("status connected, not synced: %+v, %v", st, err)
	}
	f.a.stats.set(func(s *stats) { s.connected, s.synced, s.broker, s.linkErr = true, true, "tls://127.0.0.1:7300", "" })
	if st, err := AskStatus(dir, 5*time.Second); err != nil || !st.Connected || !st.Synced || st.Broker != "tls://127.0.0.1:7300" || st.Error != "" {
		t.Fatalf("status connected: %+v, %v", st, err)
	}

	// An older agent answers every request but hooks retry with a refusal.
	old := socketDir(t)
	ln, err := net.Listen("unix", SocketPath(old))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		bufio.NewReader(c).ReadString('\n')
		fmt.Fprintln(c, `{"refused":"unknown request"}`)
	}()
	if _, err := AskStatus(old, 5*time.Second); !errors.Is(err, ErrOlderAgent) {
		t.Fatalf("an older agent's refusal: %v, want ErrOlderAgent", err)
	}
	if _, err := AskStatus(socketDir(t), 5*time.Second); !errors.Is(err, ErrNoAgent) {
		t.Fatalf("no agent: %v, want ErrNoAgent", err)
	}
}

// A state directory too deep for a socket's address is named as such, with the fix,
// by the agent that cannot listen and by the commands that cannot ask it; the system
// said "invalid argument", and meshhost status called the agent not running.
func TestASocketPathTooLongIsNamed(t *testing.T) {
	short := socketDir(t)
	fits := short + "/" + strings.Repeat("d", maxSocketPath-len(short)-len(SocketName)-2)
	deep := fits + "d"
	if n := len(SocketPath(fits)); n != maxSocketPath {
		t.Fatalf("the longest path that fits is %d bytes, want %d", n, maxSocketPath)
	}
	for _, d := range []string{fits, deep} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := listenSocket(SocketPath(fits))
	if err != nil {
		t.Fatalf("a path of %d bytes: %v", len(SocketPath(fits)), err)
	}
	ln.Close()

	if _, err := listenSocket(SocketPath(deep)); !errors.Is(err, ErrSocketPathTooLong) || !strings.Contains(err.Error(), "--state directory") {
		t.Errorf("listen on a path of %d bytes: %v, want ErrSocketPathTooLong with the fix", len(SocketPath(deep)), err)
	}
	if _, err := AskStatus(deep, time.Second); !errors.Is(err, ErrSocketPathTooLong) || errors.Is(err, ErrNoAgent) {
		t.Errorf("status: %v, want ErrSocketPathTooLong, not ErrNoAgent", err)
	}
	if _, err := RetryHooks(deep, time.Second); !errors.Is(err, ErrSocketPathTooLong) {
		t.Errorf("hooks retry: %v, want ErrSocketPathTooLong", err)
	}
}

// TestRetryWhenTheAgentStops: an agent that closes the socket without an answer (it
// was stopped, or crashed, while the hooks ran) is said to have stopped, with what
// happens to the hooks; it was "the agent's answer: EOF".
func TestRetryWhenTheAgentStops(t *testing.T) {
	dir := socketDir(t)
	ln, err := listenSocket(SocketPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		bufio.NewReader(c).ReadString('\n') // the request, then nothing
		c.Close()
	}()
	_, err = RetryHooks(dir, 10*time.Second)
	if !errors.Is(err, ErrAgentStopped) || !strings.Contains(err.Error(), "runs them when it starts again") {
		t.Fatalf("the agent closing without an answer: %v, want ErrAgentStopped saying the hooks stay owed", err)
	}
}
