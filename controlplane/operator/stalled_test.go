package operator

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// TestStalledBrokerIsTriedAgain: a broker that takes the connection and does not
// complete the TLS handshake in time (a control node busy with 10,000 hosts
// reconnecting after a restart: `meshctl declare` failed so once in five fleet runs,
// exit 3) is tried again within the leader wait; an address that refuses the
// connection is not, and fails at once.
func TestStalledBrokerIsTriedAgain(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			defer c.Close() // held open, silent, until the test ends
		}
	}()
	e := Endpoint{Servers: []string{ln.Addr().String()}, Creds: writeCreds(t)}
	start := time.Now()
	_, err = DialEndpoint(e, Options{Timeout: 300 * time.Millisecond, LeaderWait: 1500 * time.Millisecond})
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("a silent broker: %v, want ErrUnreachable", err)
	}
	if n := accepted.Load(); n < 2 {
		t.Fatalf("a broker that took the connection and stalled was tried %d time(s), want again within the leader wait (%v)", n, err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("gave up after %v, beyond the leader wait", took)
	}

	// Nothing listens: tried again for the leader wait too (a control node opens its
	// broker once a leader is known: TestDialWaitsForABrokerThatOpens), and the
	// error says how long it was refused.
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := closed.Addr().String()
	closed.Close()
	start = time.Now()
	_, err = DialEndpoint(Endpoint{Servers: []string{addr}, Creds: e.Creds}, Options{Timeout: 300 * time.Millisecond, LeaderWait: time.Second})
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "no control node listens there yet") {
		t.Fatalf("nothing listening: %v, want ErrUnreachable saying it was refused for the leader wait", err)
	}
	if took := time.Since(start); took < 700*time.Millisecond || took > 3*time.Second {
		t.Fatalf("a refused connection was tried for %v, want about the leader wait (1s)", took)
	}
}

// writeCreds writes operator credentials (a user JWT and its seed) to a file.
func writeCreds(t *testing.T) string {
	t.Helper()
	account, _ := nkeys.CreateAccount()
	user, _ := nkeys.CreateUser()
	upub, _ := user.PublicKey()
	seed, _ := user.Seed()
	token, err := jwt.NewUserClaims(upub).Encode(account)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := jwt.FormatUserConfig(token, seed)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "admin.creds")
	if err := os.WriteFile(path, creds, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
