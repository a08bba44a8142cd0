package agent

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// startTestHTTP serves the agent's endpoint within lim on a free loopback port
// until the test ends, and returns its address.
func startTestHTTP(t *testing.T, a *Agent, lim webLimits) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var served sync.WaitGroup
	served.Go(func() { a.serveHTTPWithin(ctx, ln, lim) })
	t.Cleanup(func() { cancel(); served.Wait() })
	return ln.Addr().String()
}

// keptAlive is a client connection that sends its requests one after the other
// on the one connection, as a scraper with keep-alive does.
type keptAlive struct {
	net.Conn
	r *bufio.Reader
}

func dialKeptAlive(t *testing.T, addr string) *keptAlive {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &keptAlive{Conn: c, r: bufio.NewReader(c)}
}

func (c *keptAlive) send(t *testing.T, path string) {
	t.Helper()
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: metrics\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
}

// answer reads the answer to the request sent, waiting at most wait.
func (c *keptAlive) answer(t *testing.T, wait time.Duration) (int, error) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(wait))
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, err
	}
	return resp.StatusCode, nil
}

// TestMetricsEndpointClosesAnIdleConnection: a client that sent one request on a
// keep-alive connection and then stays silent has the connection closed by the
// agent once it has been idle for the idle timeout. Before, it was held for as
// long as the client kept it, and enough of them took the agent's descriptors.
func TestMetricsEndpointClosesAnIdleConnection(t *testing.T) {
	f := newFixture(t)
	lim := defaultWebLimits()
	lim.idle = 200 * time.Millisecond
	c := dialKeptAlive(t, startTestHTTP(t, f.a, lim))
	c.send(t, "/healthz")
	if code, err := c.answer(t, 5*time.Second); err != nil || code != http.StatusOK {
		t.Fatalf("answered %d, %v", code, err)
	}
	start := time.Now()
	c.SetReadDeadline(start.Add(5 * time.Second))
	_, err := c.r.ReadByte()
	if !errors.Is(err, io.EOF) {
		t.Fatalf("the idle connection was not closed by the agent (after %v: %v)", time.Since(start).Round(time.Millisecond), err)
	}
}

// TestMetricsEndpointCapsItsConnections: with as many connections open as the cap
// allows, one more is not served (it waits in the kernel's backlog, taking no
// descriptor of the agent) until one of the others closes; then it is.
func TestMetricsEndpointCapsItsConnections(t *testing.T) {
	f := newFixture(t)
	lim := defaultWebLimits()
	lim.conns = 2
	addr := startTestHTTP(t, f.a, lim)
	held := []*keptAlive{dialKeptAlive(t, addr), dialKeptAlive(t, addr)}
	for _, c := range held {
		c.send(t, "/healthz")
		if code, err := c.answer(t, 5*time.Second); err != nil || code != http.StatusOK {
			t.Fatalf("within the cap: answered %d, %v", code, err)
		}
	}
	extra := dialKeptAlive(t, addr)
	extra.send(t, "/healthz")
	var ne net.Error
	if code, err := extra.answer(t, 300*time.Millisecond); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("beyond the cap: answered %d, %v; want no answer while the cap is reached", code, err)
	}
	held[0].Close()
	if code, err := extra.answer(t, 5*time.Second); err != nil || code != http.StatusOK {
		t.Fatalf("once a place is free: answered %d, %v", code, err)
	}
}
