package daemon

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"mesh/integration/freeport"
)

// startTestWeb serves h on a free address within lim until the test ends.
func startTestWeb(t *testing.T, h http.Handler, lim webLimits) string {
	t.Helper()
	addr := freeport.Addrs(t, 1)[0]
	e, err := startWebWithin(addr, h, slog.New(slog.DiscardHandler), lim)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.close)
	return addr
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

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })

// TestMetricsEndpointClosesAnIdleConnection: a client that sent one request on a
// keep-alive connection and then stays silent has the connection closed by the
// endpoint once it has been idle for the idle timeout. Before, it was held for as
// long as the client kept it: a stranger's 4,100 of them took the control node's
// file descriptors.
func TestMetricsEndpointClosesAnIdleConnection(t *testing.T) {
	lim := defaultWebLimits()
	lim.idle = 200 * time.Millisecond
	addr := startTestWeb(t, okHandler, lim)
	c := dialKeptAlive(t, addr)
	c.send(t, "/healthz")
	if code, err := c.answer(t, 5*time.Second); err != nil || code != http.StatusOK {
		t.Fatalf("answered %d, %v", code, err)
	}
	start := time.Now()
	c.SetReadDeadline(start.Add(5 * time.Second))
	_, err := c.r.ReadByte()
	if !errors.Is(err, io.EOF) {
		t.Fatalf("the idle connection was not closed by the endpoint (after %v: %v)", time.Since(start).Round(time.Millisecond), err)
	}
}

// TestMetricsEndpointCapsItsConnections: with as many connections open as the cap
// allows, one more is not served (it waits in the kernel's backlog, taking no
// descriptor of the process) until one of the others closes; then it is.
func TestMetricsEndpointCapsItsConnections(t *testing.T) {
	lim := defaultWebLimits()
	lim.conns = 2
	addr := startTestWeb(t, okHandler, lim)
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

// TestMetricsEndpointServesAProfileLongerThanItsWriteTimeout: with --pprof, a CPU
// profile asked to run longer than the endpoint's write timeout is answered whole
// (net/http/pprof extends the write deadline of its request by the seconds asked):
// the write timeout does not take `go tool pprof`'s 30 s default away.
func TestMetricsEndpointServesAProfileLongerThanItsWriteTimeout(t *testing.T) {
	d := &Daemon{opts: Options{Profiling: true}, registry: prometheus.NewRegistry()}
	lim := defaultWebLimits()
	lim.write = 200 * time.Millisecond
	addr := startTestWeb(t, d.handler(), lim)
	start := time.Now()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + addr + "/debug/pprof/profile?seconds=1")
	if err != nil {
		t.Fatalf("the profile: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusInternalServerError && strings.Contains(string(body), "already in use") {
		t.Skip("another CPU profile runs (go test -cpuprofile)")
	}
	if err != nil || resp.StatusCode != http.StatusOK || len(body) == 0 || time.Since(start) < time.Second {
		t.Fatalf("the profile: %d, %d bytes after %v, %v: %.200s", resp.StatusCode, len(body), time.Since(start), err, body)
	}
}
