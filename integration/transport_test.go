package integration

import (
	"errors"
	"strings"
	"testing"
	"time"

	"mesh/host/identity"
	"mesh/integration/harness"
	"mesh/tokenfmt"
)

const hostExitUnreachable = 7

// tokenVia re-targets a minted token at another address (a proxy, a relay): the token's
// checksum is recomputed, as anyone could.
func tokenVia(t *testing.T, text, addr string) string {
	t.Helper()
	tok, err := tokenfmt.Parse(text, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tok.Brokers = mustAddrs(t, addr)
	return tok.Encode()
}

// TestTLSTerminatingRelayRefused: a relay that terminates TLS with a certificate of its
// own (and forwards to the real broker) is refused like an impostor: the pin, not the
// path, decides. A transparent TCP relay is accepted for the same reason.
func TestTLSTerminatingRelayRefused(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "relay")
	cp.Serve()
	relay := harness.StartTLSRelay(t, "127.0.0.1:0", cp.Listen)
	text := cp.Token("web-1")
	h := harness.NewHost(t, bin, "web-1")
	r := h.Enrol(tokenVia(t, text, relay.Addr()))
	if r.Code != hostExitSubstituted || !strings.Contains(r.Combined(), "retrying will not help") {
		t.Fatalf("through a TLS-terminating relay: exit %d:\n%s", r.Code, r.Combined())
	}
	if n := relay.PlaintextBytes(); n != 0 {
		t.Fatalf("the relay read %d plaintext bytes, want 0", n)
	}
	if _, err := identity.Load(h.State); !errors.Is(err, identity.ErrNotEnrolled) {
		t.Fatalf("identity after relay refusal: %v", err)
	}

	proxy := harness.StartProxy(t, "127.0.0.1:0", cp.Listen)
	if r := h.Enrol(tokenVia(t, text, proxy.Addr())); r.Code != 0 {
		t.Fatalf("through a transparent TCP relay (exit %d):\n%s", r.Code, r.Combined())
	}
	if proxy.Bytes() == 0 {
		t.Fatal("the enrolment did not go through the transparent relay")
	}
	// The agent then talks through the address the mesh gave it, and converges.
	h.Run()
	body := t.TempDir() + "/b.json"
	writeFile(t, body, `{"files":[{"path":"f","content":"x"}]}`)
	cp.Ctl("declare", "--node", "web-1", "--file", body)
	cp.WaitConverged("web-1", 1, 20*time.Second)
}

// TestEnrolmentReplyLost: the connection is cut after the mesh committed the enrolment
// and before its reply arrives. Running enrol again with the same token succeeds with
// the same key; there is one node record, one identity, no half-written file.
func TestEnrolmentReplyLost(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "replylost")
	cp.Serve()
	proxy := harness.StartProxy(t, "127.0.0.1:0", cp.Listen)
	proxy.CutOnLargeReply(1200)
	text := tokenVia(t, cp.Token("web-1"), proxy.Addr())
	h := harness.NewHost(t, bin, "web-1")

	r := h.Enrol(text, "--timeout", "5s")
	if proxy.Dropped() != 1 {
		t.Fatalf("the fault did not fire (exit %d):\n%s", r.Code, r.Combined())
	}
	if r.Code != hostExitUnreachable || !strings.Contains(r.Combined(), "run enrol again with the same token") {
		t.Fatalf("cut mid-enrolment: exit %d, want %d:\n%s", r.Code, hostExitUnreachable, r.Combined())
	}
	if _, err := identity.Load(h.State); !errors.Is(err, identity.ErrNotEnrolled) {
		t.Fatalf("an identity exists after a cut enrolment: %v", err)
	}
	pending, err := identity.LoadPending(h.State)
	if err != nil {
		t.Fatalf("the key of the unfinished enrolment was not kept: %v", err)
	}
	n, ok := cp.Node("web-1")
	if !ok {
		t.Fatal("the mesh did not commit the enrolment before the cut: the fault hit the wrong moment")
	}

	r = h.Enrol(text)
	if r.Code != 0 || !strings.Contains(r.Stdout, "reusing the key of the unfinished enrolment") {
		t.Fatalf("re-running enrol with the same token (exit %d):\n%s", r.Code, r.Combined())
	}
	id, err := identity.Load(h.State)
	if err != nil {
		t.Fatal(err)
	}
	pk, _ := pending.KeyPair()
	pub, _ := pk.PublicKey()
	if id.PublicKey != pub || id.PublicKey != n.PublicKey {
		t.Fatalf("keys differ: identity %s, pending %s, mesh %s", id.PublicKey, pub, n.PublicKey)
	}
	if _, err := identity.LoadPending(h.State); !errors.Is(err, identity.ErrNoPending) {
		t.Fatalf("the pending key was not removed after success: %v", err)
	}
	count := 0
	for _, v := range cp.Nodes().Nodes {
		if v.ID == "web-1" {
			count++
		}
	}
	if count != 1 {
		t.Fatalf("%d node records for web-1", count)
	}
}

// TestBrokerRestartMidEnrolment: the control plane dies (SIGKILL) while a host is
// enrolling; after it restarts, enrol with the same token succeeds.
func TestBrokerRestartMidEnrolment(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "restart")
	serve := cp.Serve()
	proxy := harness.StartProxy(t, "127.0.0.1:0", cp.Listen)
	text := tokenVia(t, cp.Token("web-1"), proxy.Addr())
	h := harness.NewHost(t, bin, "web-1")

	proxy.Stall() // the host's handshake hangs on the wire...
	done := make(chan harness.Result, 1)
	go func() { done <- h.Enrol(text, "--timeout", "5s") }()
	time.Sleep(500 * time.Millisecond)
	serve.Kill() // ...while the control plane dies
	proxy.Unstall()
	r := <-done
	if r.Code == 0 {
		t.Fatalf("enrolment succeeded against a dead control plane:\n%s", r.Combined())
	}
	if r.Code != hostExitUnreachable {
		t.Fatalf("exit %d, want %d (retrying may help):\n%s", r.Code, hostExitUnreachable, r.Combined())
	}
	cp.Serve()
	if r := h.Enrol(text); r.Code != 0 {
		t.Fatalf("enrol after the restart (exit %d):\n%s", r.Code, r.Combined())
	}
	if _, err := identity.Load(h.State); err != nil {
		t.Fatal(err)
	}
}

// TestSlowLink: 200 ms round trip, and a 3 s stall in the middle: enrolment and
// convergence still succeed within the documented timeouts (enrol: 10 s dial, 20 s
// reply; agent: reconnects with backoff, pings every 20 s).
func TestSlowLink(t *testing.T) {
	t.Parallel()
	cp, proxy := harness.NewControlPlaneBehindProxy(t, bin, "slow")
	cp.Serve()
	proxy.SetLatency(100 * time.Millisecond)
	h := harness.NewHost(t, bin, "web-1")
	start := time.Now()
	if r := h.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol over a slow link (exit %d):\n%s", r.Code, r.Combined())
	}
	t.Logf("enrolment over a 200 ms round trip took %s", time.Since(start).Round(time.Millisecond))
	h.Run()
	body := t.TempDir() + "/b.json"
	writeFile(t, body, `{"files":[{"path":"f","content":"slow"}]}`)
	cp.Ctl("declare", "--node", "web-1", "--file", body)
	cp.WaitConverged("web-1", 1, 30*time.Second)

	proxy.Stall()
	writeFile(t, body, `{"files":[{"path":"f","content":"stalled"}]}`)
	cp.Ctl("declare", "--node", "web-1", "--file", body)
	time.Sleep(3 * time.Second)
	if got, _ := h.ReadManaged("f"); got != "slow" {
		t.Fatalf("something crossed a stalled link: f = %q", got)
	}
	proxy.Unstall()
	cp.WaitConverged("web-1", 2, 30*time.Second)
	if got, _ := h.ReadManaged("f"); got != "stalled" {
		t.Fatalf("after the stall f = %q", got)
	}
}
