package presence

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"mesh/logging"
)

// syncBuffer is a log written and read from different goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestKicksNotSentAreLoggedBounded: the tracker's connection closed under it (a local
// reconnect), a revocation of a thousand nodes asks for a thousand kicks, each of
// which fails. One line says so, not a thousand; the first one an interval later
// counts those held back.
func TestKicksNotSentAreLoggedBounded(t *testing.T) {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(s.Shutdown)
	if !s.ReadyForConnections(5 * time.Second) {
		t.Fatal("broker not ready")
	}
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	var log syncBuffer
	clock := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	tr, err := Start(Config{Conn: nc, Connect: "events.connect", Disconnect: "events.disconnect",
		Logger: slog.New(slog.NewTextHandler(&log, nil)), Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	const kicks = 1000
	for i := range kicks {
		tr.KickConn(Conn{Server: "S1", CID: uint64(i)})
	}
	if n := strings.Count(log.String(), "could not ask a broker to close a connection"); n != 1 {
		t.Fatalf("%d kicks not sent gave %d lines, want 1:\n%.2000s", kicks, n, log.String())
	}
	clock = clock.Add(logging.RepeatInterval)
	tr.KickConn(Conn{Server: "S1", CID: kicks})
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	if last := lines[len(lines)-1]; len(lines) != 2 || !strings.Contains(last, fmt.Sprintf("%s=%d", logging.SuppressedKey, kicks-1)) {
		t.Fatalf("an interval later, the next kick not sent logged %q, want the %d held back counted", last, kicks-1)
	}
}
