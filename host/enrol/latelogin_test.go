package enrol

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"mesh/host/wire"
)

// stallingOut blocks the write of the winning "connect" step until onWin returns.
type stallingOut struct {
	mu    sync.Mutex
	b     strings.Builder
	once  sync.Once
	onWin func()
}

func (s *stallingOut) Write(p []byte) (int, error) {
	if strings.Contains(string(p), "it is the mesh") {
		s.once.Do(s.onWin)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// TestNoAttemptLogsInWhileTheWinnerIsReported (a review): dialEnrolment took the
// node key back (key.end) only when it returned, after r.step had written the
// winner's line to Out. An attempt at another broker that reached its login while
// that write was under way (a slow terminal or pipe) still held the lent key,
// signed, and sent CONNECT with the token proof. The key is taken back first.
func TestNoAttemptLogsInWhileTheWinnerIsReported(t *testing.T) {
	mesh := newFakeMesh(t, func(*wire.EnrolResponse) {})
	hold, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{mesh.leaf}, MinVersion: tls.VersionTLS13})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hold.Close() })
	release := make(chan struct{})
	heard := make(chan string, 1)
	go func() {
		c, err := hold.Accept()
		if err != nil {
			heard <- "accept: " + err.Error()
			return
		}
		defer c.Close()
		if err := c.(*tls.Conn).Handshake(); err != nil {
			heard <- "handshake: " + err.Error()
			return
		}
		<-release
		fmt.Fprintf(c, "INFO {\"server_id\":\"held\",\"version\":\"2.15.2\",\"proto\":1,\"headers\":true,\"max_payload\":1048576,\"auth_required\":true,\"tls_required\":true,\"nonce\":\"abcdefghijklmnop\"}\r\n")
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			heard <- ""
			return
		}
		heard <- line
	}()
	tok := withBrokersFirst(t, mesh.token, []string{hold.Addr().String()})
	var got string
	out := &stallingOut{onWin: func() {
		close(release)
		select {
		case got = <-heard:
		case <-time.After(4 * time.Second):
		}
	}}
	if _, err := Enrol(context.Background(), Options{StateDir: filepath.Join(t.TempDir(), "state"), Token: tok, Out: out,
		DialTimeout: 10 * time.Second, RequestTimeout: 5 * time.Second, DialStagger: 100 * time.Millisecond}); err != nil {
		t.Fatalf("enrol: %v", err)
	}
	if strings.HasPrefix(got, "CONNECT") {
		t.Fatalf("an attempt at another broker logged in after the enrolment had its connection (during r.step): %.160s…", got)
	}
}
