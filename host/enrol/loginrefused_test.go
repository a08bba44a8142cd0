package enrol

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"hash/crc32"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"mesh/host/identity"
)

// refusingBroker is a broker under the test's CA, as the token pins it, that
// refuses every login but its own user's; it returns a token naming it.
func refusingBroker(t *testing.T) string {
	t.Helper()
	caDER, leaf := meshCertificates(t)
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		TLS: true, TLSHandshakeFirst: true, AlwaysEnableNonce: true, Username: "operator", Password: "not-the-hosts",
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{leaf}, MinVersion: tls.VersionTLS13}})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(s.Shutdown)
	if !s.ReadyForConnections(5 * time.Second) {
		t.Fatal("broker not ready")
	}
	broker := s.Addr().(*net.TCPAddr).String()
	_, signing, _ := ed25519.GenerateKey(rand.Reader)
	ca, _ := x509.ParseCertificate(caDER)
	pin := sha256.Sum256(ca.RawSubjectPublicKeyInfo)
	var secret [32]byte
	rand.Read(secret[:])
	signed := fmt.Sprintf("mesh1_demo_%s_%x_%x_web-1_worker_%d_%x", broker, pin, signing.Public(), time.Now().Add(30*time.Minute).Unix(), secret)
	return fmt.Sprintf("%s_%08x", signed, crc32.Checksum([]byte(signed), crc32.MakeTable(crc32.Castagnoli)))
}

// TestARefusedLoginIsNotCalledAnUnknownToken: a broker proven the mesh's that
// refuses the enrolment's login says nothing of why: the token may be unknown, or
// over its budget of connections for the moment, or the mesh out of room. The
// refusal is login_refused, which a run again may cure (exit 7), its message lists
// the causes without asserting one, and the pending key is kept: a run with the
// same token presents it again. Before, it was token_unknown, "this mesh never
// minted this token: ask the operator for a new one", exit 3, after a rate limit
// that a minute's wait lifted.
func TestARefusedLoginIsNotCalledAnUnknownToken(t *testing.T) {
	tok := refusingBroker(t)
	dir := filepath.Join(t.TempDir(), "state")
	var out strings.Builder
	o := Options{StateDir: dir, Token: tok, Out: &out, DialTimeout: 5 * time.Second, RequestTimeout: 5 * time.Second}
	_, err := Enrol(context.Background(), o)
	var re *RefusedError
	if !errors.As(err, &re) || !errors.Is(err, ErrRefused) || re.Code != CodeLoginRefused {
		t.Fatalf("got %v, want the refusal %s", err, CodeLoginRefused)
	}
	if !re.Retryable() {
		t.Error("a refused login is not retryable: exit 3, as if waiting could not help")
	}
	msg := err.Error()
	// The next step on a line of its own, after what happened, the causes on
	// theirs (a walkthrough: 1,200 characters on one line).
	if lines := strings.Split(msg, "\n"); len(lines) != 4 || !strings.HasPrefix(lines[1], "Next: wait a minute") || !strings.HasPrefix(lines[3], "Why it refuses for good") {
		t.Errorf("the refusal is not said a part a line:\n%s", msg)
	}
	for _, want := range []string{"(login_refused)", "without saying why", "wait a minute and run enrol again with the same token", "never minted", "for a new one", "upgrade the control plane before the agents"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "token_unknown") || strings.Contains(msg, "this mesh never minted this token") {
		t.Errorf("the refusal asserts the token is unknown:\n%s", msg)
	}
	p, perr := identity.LoadPending(dir)
	if perr != nil {
		t.Fatalf("the pending key was not kept for a run with the same token: %v", perr)
	}
	kp, _ := p.KeyPair()
	pub, _ := kp.PublicKey()
	out.Reset()
	if _, err := Enrol(context.Background(), o); !errors.As(err, &re) || re.Code != CodeLoginRefused {
		t.Fatalf("second run: %v", err)
	}
	if !strings.Contains(out.String(), "reusing the key of the unfinished enrolment "+pub) {
		t.Errorf("the second run did not present the kept key:\n%s", out.String())
	}
	if _, err := identity.LoadPending(dir); err != nil {
		t.Errorf("after a second refused login the key is gone: %v", err)
	}
}

// TestARefusedLoginLeadsWithTheNextStep: the refusal says what to do before why it
// may have happened, and keeps every cause. It was one line of some 1,300
// characters, the causes first and the next step (and meshctl token list) at its
// very end.
func TestARefusedLoginLeadsWithTheNextStep(t *testing.T) {
	tok := refusingBroker(t)
	o := Options{StateDir: filepath.Join(t.TempDir(), "state"), Token: tok, Out: &strings.Builder{}, DialTimeout: 5 * time.Second, RequestTimeout: 5 * time.Second}
	_, err := Enrol(context.Background(), o)
	var re *RefusedError
	if !errors.As(err, &re) || re.Code != CodeLoginRefused {
		t.Fatalf("got %v, want the refusal %s", err, CodeLoginRefused)
	}
	msg := err.Error()
	first := len(msg)
	for _, cause := range []string{
		"too many connections used this token in the last 30 seconds",
		"this address made too many failed attempts in the last minute",
		"no control node reached has room for another host",
		"a token this mesh never minted",
		"expired more than a day ago",
		"minted by a meshctl older than the control plane's",
		"a node key that was revoked",
		"a login relayed by something on the path that holds a certificate of the mesh",
		"a meshctl older than the proof this meshhost sends",
	} {
		i := strings.Index(msg, cause)
		if i < 0 {
			t.Errorf("the refusal no longer names the cause %q:\n%s", cause, msg)
			continue
		}
		first = min(first, i)
	}
	for _, step := range []string{"wait a minute and run enrol again with the same token", "refused again", "meshctl token list", "for a new one"} {
		if i := strings.Index(msg, step); i < 0 || i > first || i > 400 {
			t.Errorf("the next step %q is not said before the causes, within the first 400 characters (at %d, the first cause at %d):\n%s", step, i, first, msg)
		}
	}
}
