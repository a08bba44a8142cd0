package broker_test

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"strings"
	"testing"
	"time"

	"mesh/broker"
	"mesh/controlplane/pki"
)

// TestASecondConnectIsNoRecheck: the broker tells the authenticator that a login is
// a recheck (Client.Recheck, which skips the signature and proof checks) when the
// connection is already in one of the mesh's accounts: nats-server asks again about
// every connection on a reload. A client may also send CONNECT again on a live
// connection, with another credential; that must be judged in full, as a login. It
// is today because nats-server moves such a client back to its global account before
// asking; this test holds the broker to it across nats-server versions (a review:
// nothing else would notice a release that kept the account, and then any host
// could present another node's key with a signature nobody checks).
func TestASecondConnectIsNoRecheck(t *testing.T) {
	m := newMesh(t)
	grants := accountGrants()
	grants["host-b"] = broker.Grant{User: "node:b", Account: broker.AccountHosts,
		Publish: []string{"mesh.node.b.status"}, Subscribe: []string{"mesh.node.b.decl"}}
	auth := byToken(grants)
	s, _ := start(t, m, auth)

	conn, err := tls.Dial("tcp", s.Addr(), pki.PinnedClientConfig(m.ca.Pin()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(conn)
	if info, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(info, "INFO") {
		t.Fatalf("no INFO: %q %v", info, err)
	}
	connect := func(token string) string {
		t.Helper()
		fmt.Fprintf(conn, "CONNECT {\"auth_token\":%q,\"verbose\":false,\"pedantic\":false,\"protocol\":1}\r\nPING\r\n", token)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return "closed: " + err.Error()
			}
			if !strings.HasPrefix(line, "INFO") {
				return strings.TrimSpace(line)
			}
		}
	}
	if got := connect("host"); got != "PONG" {
		t.Fatalf("the first CONNECT answered %q, want PONG", got)
	}
	connect("host-b")
	calls := auth.calls()
	if len(calls) != 2 {
		t.Fatalf("the authenticator was asked %d times, want once for each CONNECT", len(calls))
	}
	if calls[0].Recheck || calls[1].Recheck {
		t.Errorf("a CONNECT was passed as a recheck (first %v, second %v): a second CONNECT on a live connection would skip the checks of a login",
			calls[0].Recheck, calls[1].Recheck)
	}
}
