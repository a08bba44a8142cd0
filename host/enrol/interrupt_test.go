package enrol

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/host/identity"
	"mesh/host/wire"
)

// TestEnrolStopsWhenInterrupted: SIGINT or SIGTERM (the context ending) stops an
// enrolment at once, whether it is dialling a broker that accepted the connection and
// never answers its TLS handshake, or waiting for the mesh's answer, and says it was
// interrupted; before, the dial went on to its 10 s timeout and ended "no broker of
// the mesh could be reached". Nothing is saved but the pending key, which the next
// run presents again.
func TestEnrolStopsWhenInterrupted(t *testing.T) {
	silent := silentBroker(t)
	signed := fmt.Sprintf("mesh1_demo_%s_%s_%s_web-1_worker_%d_%s", silent.Addr(), strings.Repeat("ab", 32), strings.Repeat("cd", 32),
		time.Now().Add(30*time.Minute).Unix(), strings.Repeat("ef", 32))
	stalled := fmt.Sprintf("%s_%08x", signed, crc32.Checksum([]byte(signed), crc32.MakeTable(crc32.Castagnoli)))
	// An answer cleared stands for one that never comes.
	unanswered := newFakeMesh(t, func(r *wire.EnrolResponse) { r.V = 0 }).token

	for name, tok := range map[string]string{"connecting": stalled, "waiting for the mesh's answer": unanswered} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "state")
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(500*time.Millisecond, cancel)
			start := time.Now()
			_, err := Enrol(ctx, Options{StateDir: dir, Token: tok, DialTimeout: 10 * time.Second, RequestTimeout: 20 * time.Second})
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("interrupted after 0.5 s, it returned after %s", took)
			}
			if !errors.Is(err, ErrInterrupted) || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "run enrol again with the same token") {
				t.Fatalf("got %v, want ErrInterrupted while %s, saying to run again", err, name)
			}
			if _, err := identity.Load(dir); !errors.Is(err, identity.ErrNotEnrolled) {
				t.Fatalf("after the interruption the identity is %v, want none", err)
			}
		})
	}
}

// silentBroker listens on a loopback address that takes connections and never
// answers (a TLS handshake waits there), until the test ends.
func silentBroker(t *testing.T) net.Listener {
	t.Helper()
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() })
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	return silent
}
