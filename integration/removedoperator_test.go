package integration

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/controlplane/datadir"
	"mesh/controlplane/operator"
	"mesh/controlplane/pki"
	"mesh/integration/harness"
)

// TestAnOperatorConnectionOfARemovedControlNodeIsClosed: a connection made to cp-1
// with cp-2's operator credentials (admin.creds, which the removed machine keeps,
// and operators may have copied) before cp-2 is removed, subscribed to _INBOX.>:
// an operator's grant, so it hears every operator's answers. nats-server checks a
// connection's credentials at login and on a reload of its options, never in
// between, and nothing closed such a connection on purpose: it lost its rights only
// as the reload of the routes' change re-checked it, and kept every right of an
// operator (every change, every operator's answers) wherever that reload did not
// come (daemon/TestARemovedControlNodesOperatorConnectionIsClosed shows it). Each
// control node now closes such connections as it applies the removal: closed
// within seconds, and the credentials log in again with the reads only. (Here the
// routes change with the removal, so the reload comes as well: this test holds the
// outcome over the built binaries, the daemon's test the close itself.)
func TestAnOperatorConnectionOfARemovedControlNodeIsClosed(t *testing.T) {
	t.Parallel() // mostly waits (a join, a removal): see TestMain
	cp1 := harness.NewControlPlane(t, bin, "opremoved")
	cp1.Serve()
	cp2 := joinControl(t, cp1, "cp-2")
	cfg, err := datadir.Dir(cp1.Dir).LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	pin, err := cfg.Pin()
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	eaves, err := nats.Connect("tls://"+cp1.Listen, append(operator.CredsLogin(filepath.Join(cp2.Dir, datadir.AdminCredsFile), pki.PinnedClientConfig(pin), 10*time.Second),
		nats.NoReconnect(), nats.ClosedHandler(func(*nats.Conn) { close(closed) }),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))...)
	if err != nil {
		t.Fatalf("cp-2's operator credentials, before its removal: %v", err)
	}
	defer eaves.Close()
	heard, err := eaves.SubscribeSync("_INBOX.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := eaves.Flush(); err != nil {
		t.Fatal(err)
	}
	// What such a connection holds while cp-2 is a member: another operator's
	// answers.
	if r := cp1.Ctl("nodes"); r.Code != 0 {
		t.Fatalf("nodes: %s", r.Combined())
	}
	if _, err := heard.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("cp-2's operator connection did not hear another operator's answer while cp-2 was a member: the test shows nothing (%v)", err)
	}

	if r := cp1.Ctl("control", "remove", "cp-2"); r.Code != 0 {
		t.Fatalf("control remove cp-2 (exit %d): %s", r.Code, r.Combined())
	}
	removed := time.Now()
	select {
	case <-closed:
		t.Logf("closed %s after meshctl control remove returned", time.Since(removed).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatal("the connection made with cp-2's operator credentials before its removal is still open 5 s after it")
	}
	// The credentials log in again, with the reads only (meshctl says so, exit 4).
	r := harness.Run(t, "", nil, bin.Meshctl, "token", "--node", "web-1", "--data", cp2.Dir, "--servers", cp1.Listen)
	if r.Code != 4 || !strings.Contains(r.Stderr, "may only read") {
		t.Errorf("a token minted with cp-2's credentials after its removal: exit %d, want 4 saying they may only read:\n%s", r.Code, r.Combined())
	}
	// control status asks every control node, which they may not: said so, exit
	// 4 (it was exit 1, "they are not an operator's": a walkthrough).
	r = harness.Run(t, "", nil, bin.Meshctl, "control", "status", "--data", cp2.Dir, "--servers", cp1.Listen)
	if r.Code != 4 || !strings.Contains(r.Stderr, "may only read") || !strings.Contains(r.Stderr, "meshctl nodes") {
		t.Errorf("control status with cp-2's credentials after its removal: exit %d, want 4 saying they may only read:\n%s", r.Code, r.Combined())
	}
	cp2.Process().Wait(30 * time.Second)
}
