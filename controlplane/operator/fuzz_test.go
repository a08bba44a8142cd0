package operator

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/controlplane/pki"
)

// TestParseServersRefusesBadPorts: a port that is not a number from 1 to 65535, and a
// host holding spaces, control characters or a URL's parts, are refused at once
// rather than met at the first dial.
func TestParseServersRefusesBadPorts(t *testing.T) {
	for _, bad := range []string{
		"10.0.0.1:http", "10.0.0.1:0", "10.0.0.1:65536", "10.0.0.1:-1", "10.0.0.1:+80", "10.0.0.1:07300",
		"10.0.0.1:99999999999999999999", "cp 1:7300", "cp\x1b[2J:7300", "user@cp:7300", "tls://cp/x:7300", "[::1]:",
	} {
		if got, err := ParseServers(bad); !errors.Is(err, ErrEndpoint) {
			t.Errorf("%q: %v, %v; want ErrEndpoint", bad, got, err)
		}
	}
	got, err := ParseServers("[::1]:7300,cp-1.example:1,10.0.0.1:65535")
	if err != nil || len(got) != 3 {
		t.Fatalf("good addresses: %v, %v", got, err)
	}
}

// FuzzParseServers: arbitrary --servers lists. ParseServers must not panic, must
// refuse only with ErrEndpoint, and what it accepts is host:port addresses with a
// port from 1 to 65535 that parse again to themselves.
func FuzzParseServers(f *testing.F) {
	f.Add("tls://10.0.0.1:7300, 10.0.0.2:7300", "nats://cp-3.example:7300")
	f.Add("[::1]:7300", "")
	f.Add("ws://x:1", "a:b")
	f.Add(",,, ,", "[fe80::1%eth0]:7300")
	f.Fuzz(func(t *testing.T, a, b string) {
		got, err := ParseServers(a, b)
		if err != nil {
			if !errors.Is(err, ErrEndpoint) || got != nil {
				t.Fatalf("%v, error of no known kind: %v", got, err)
			}
			return
		}
		for _, s := range got {
			host, port, err := net.SplitHostPort(s)
			if err != nil || host == "" || strings.ContainsAny(s, ", \t\r\n") {
				t.Fatalf("accepted %q", s)
			}
			if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
				t.Fatalf("accepted port %q", port)
			}
		}
		again, err := ParseServers(strings.Join(got, ","))
		if err != nil || !slices.Equal(again, got) {
			t.Fatalf("%v parsed again: %v, %v", got, again, err)
		}
	})
}

// TestOperatorFilesOverTheCap: a CA file, a NATS context or credentials over 1 MiB
// are refused
// with ErrFileTooLarge after reading one byte past the cap, never read whole.
func TestOperatorFilesOverTheCap(t *testing.T) {
	dir := t.TempDir()
	huge := filepath.Join(dir, "huge.json")
	if err := os.WriteFile(huge, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(huge, 1<<30); err != nil { // sparse: no disk
		t.Fatal(err)
	}
	creds := credsFile(t)
	start := time.Now()
	if _, err := CAEndpoint([]string{"127.0.0.1:1"}, creds, huge); !errors.Is(err, ErrFileTooLarge) || !errors.Is(err, ErrEndpoint) {
		t.Errorf("CA file: %v", err)
	}
	if _, err := LoadContext(huge, func(string) string { return "" }); !errors.Is(err, ErrFileTooLarge) || !errors.Is(err, ErrEndpoint) {
		t.Errorf("context: %v", err)
	}
	o := nats.GetDefaultOptions()
	var err error
	for _, opt := range CredsLogin(huge, pki.PinnedClientConfig([32]byte{1}), time.Second) {
		if err = opt(&o); err != nil {
			break
		}
	}
	if err == nil {
		_, err = o.UserJWT()
	}
	if !errors.Is(err, ErrFileTooLarge) {
		t.Errorf("credentials: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("took %v: were the files read whole?", took)
	}
}
