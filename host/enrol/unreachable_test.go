package enrol

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/host/wire"
)

// tokenFor is a worker token, valid for half an hour, naming brokers (ip:port) in
// that order; its pin is of no CA, which matters only to a broker that answers.
func tokenFor(brokers []string) string {
	signed := fmt.Sprintf("mesh1_demo_%s_%s_%s_web-1_worker_%d_%s", strings.Join(brokers, ","), strings.Repeat("ab", 32), strings.Repeat("cd", 32),
		time.Now().Add(30*time.Minute).Unix(), strings.Repeat("ef", 32))
	return fmt.Sprintf("%s_%08x", signed, crc32.Checksum([]byte(signed), crc32.MakeTable(crc32.Castagnoli)))
}

// closedAddresses returns n distinct loopback addresses nothing listens on: each
// held until all are picked (closed one by one, the system gave a port it had just
// given again, and a token naming one broker twice is malformed).
func closedAddresses(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	var held []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, l.Addr().String())
		held = append(held, l)
	}
	for _, l := range held {
		l.Close()
	}
	return out
}

// TestUnreachableBrokersAreSaidOncePerReason: a token whose 16 brokers all fail
// alike says the reason once, with the 16 addresses, and a broker that failed
// otherwise apart, with its own reason. The final error repeated the same reason
// for each broker, 16 times over.
func TestUnreachableBrokersAreSaidOncePerReason(t *testing.T) {
	t.Run("alike", func(t *testing.T) {
		brokers := closedAddresses(t, 16)
		_, err := Enrol(context.Background(), Options{StateDir: filepath.Join(t.TempDir(), "state"), Token: tokenFor(brokers), DialTimeout: 2 * time.Second})
		if !errors.Is(err, ErrUnreachable) {
			t.Fatalf("got %v, want ErrUnreachable", err)
		}
		msg := err.Error()
		group := "16 brokers (" + strings.Join(brokers, ", ") + "): "
		i := strings.Index(msg, group)
		if i < 0 {
			t.Fatalf("the error does not say the 16 brokers together:\n%s", msg)
		}
		reason, _, _ := strings.Cut(msg[i+len(group):], ")")
		if reason == "" || strings.Count(msg, reason) != 1 {
			t.Errorf("the reason %q is not said once:\n%s", reason, msg)
		}
	})
	t.Run("apart", func(t *testing.T) {
		// A broker whose address takes the connection and never answers the TLS
		// handshake fails for another reason than those nothing listens on.
		silent := silentBroker(t)
		closed := closedAddresses(t, 3)
		brokers := append([]string{closed[0], silent.Addr().String()}, closed[1:]...)
		_, err := Enrol(context.Background(), Options{StateDir: filepath.Join(t.TempDir(), "state"), Token: tokenFor(brokers), DialTimeout: 300 * time.Millisecond})
		if !errors.Is(err, ErrUnreachable) {
			t.Fatalf("got %v, want ErrUnreachable", err)
		}
		msg := err.Error()
		if !strings.Contains(msg, "3 brokers ("+strings.Join(closed, ", ")+"): ") || !strings.Contains(msg, "; "+silent.Addr().String()+": ") {
			t.Errorf("the brokers are not said by reason, the silent one apart:\n%s", msg)
		}
	})
}

// withBrokersFirst is tok naming the brokers first, before its own, its checksum
// made again.
func withBrokersFirst(t *testing.T, tok string, first []string) string {
	t.Helper()
	cut := strings.LastIndex(tok, "_")
	fields := strings.Split(tok[:cut], "_")
	if len(fields) < 3 {
		t.Fatalf("not a token: %q", tok)
	}
	fields[2] = strings.Join(append(first, fields[2]), ",")
	signed := strings.Join(fields, "_")
	return fmt.Sprintf("%s_%08x", signed, crc32.Checksum([]byte(signed), crc32.MakeTable(crc32.Castagnoli)))
}

// TestEnrolDoesNotWaitOutSilentBrokers: a token whose first brokers take the
// connection and never answer (a machine gone behind a firewall that drops, a
// broker wedged) enrols at the broker that answers without waiting out each dial
// timeout: the next broker is tried once the one before has gone DialStagger
// unanswered. One after another, three silent brokers here kept the enrolment 30
// minutes (three 10-minute timeouts; the default is 10 s each, 16 brokers 160 s),
// and the test's 15 s ran out.
func TestEnrolDoesNotWaitOutSilentBrokers(t *testing.T) {
	mesh := newFakeMesh(t, func(*wire.EnrolResponse) {})
	var silent []string
	for range 3 {
		silent = append(silent, silentBroker(t).Addr().String())
	}
	tok := withBrokersFirst(t, mesh.token, silent)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var out strings.Builder
	res, err := Enrol(ctx, Options{StateDir: filepath.Join(t.TempDir(), "state"), Token: tok, Out: &out,
		DialTimeout: 10 * time.Minute, DialStagger: 200 * time.Millisecond})
	if err != nil {
		t.Fatalf("enrol with three silent brokers before the mesh's: %v\n%s", err, out.String())
	}
	for _, s := range silent {
		if res.Broker == s {
			t.Errorf("enrolled through %s, a broker that never answers", s)
		}
		if strings.Contains(out.String(), s) {
			t.Errorf("the plan names the silent broker %s, whose attempt was only ended:\n%s", s, out.String())
		}
	}
}

// TestATokenOfLinkLocalBrokersOnlyIsUnusable: a token minted before meshctl refused
// IPv6 link-local brokers, naming only such, was dialled in vain ("connect: invalid
// argument") and the host told retrying may help (a walkthrough): it is a token that
// cannot be used, saying why, nothing dialled and no key made. One naming another
// broker beside it is read, and that broker dialled.
func TestATokenOfLinkLocalBrokersOnlyIsUnusable(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	_, err := Enrol(context.Background(), Options{StateDir: state, Token: tokenFor([]string{"[fe80::1]:7300", "[fe80::2]:7300"}), DialTimeout: time.Second})
	if !errors.Is(err, ErrToken) || errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "link-local") || !strings.Contains(err.Error(), "new token") {
		t.Fatalf("got %v, want ErrToken saying its brokers are link-local", err)
	}
	if _, serr := os.Stat(state); !errors.Is(serr, fs.ErrNotExist) {
		t.Fatalf("the state directory was made for an unusable token: %v", serr)
	}
	closed := closedAddresses(t, 1)
	_, err = Enrol(context.Background(), Options{StateDir: state, Token: tokenFor([]string{"[fe80::1]:7300", closed[0]}), DialTimeout: time.Second})
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), closed[0]) {
		t.Fatalf("a token with a broker beside the link-local one: %v, want its broker dialled", err)
	}
}
