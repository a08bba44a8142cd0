package enrol

import (
	"context"
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
	hold, release, heard := holdingBroker(t, mesh.leaf)
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
