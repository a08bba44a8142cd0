package authn

import (
	"crypto/tls"
	"errors"
	"testing"

	"mesh/broker"
)

// TestInternalTokenOnlyInProcess: the control plane's own credential admits its
// in-process connections (no TLS: they never cross a socket) and nothing that came
// over the network, whatever role it names: a copy of the token (a core dump, a
// debugger) grants no remote client the control plane's accounts, whose grants read
// every operator's requests and answer any node's sync. Before, the same token over
// TLS was granted the role it named. Every role is tried, from Roles, which the
// daemon opens its connections by (daemon/TestOwnConnectionsAreEveryRole): the list
// the test had of its own left out the revoked account's (RoleRevoked), which
// answers any revoked key's sync.
func TestInternalTokenOnlyInProcess(t *testing.T) {
	fx := newFixture(t)
	a := fx.auth("s3cret-internal")
	for _, role := range Roles() {
		in := broker.Client{Username: string(role), Token: "s3cret-internal"}
		if _, err := a.Authenticate(in); err != nil {
			t.Fatalf("%s in process: %v", role, err)
		}
		remote := in
		remote.TLS = &tls.ConnectionState{Version: tls.VersionTLS13, HandshakeComplete: true}
		remote.Remote = remote1
		if g, err := a.Authenticate(remote); !errors.Is(err, ErrInternalMissing) {
			t.Fatalf("%s over TLS with the internal token: %+v, %v; want ErrInternalMissing", role, g, err)
		}
	}
	// A role that is none of them, in process: refused.
	if g, err := a.Authenticate(broker.Client{Username: "control-plane:everything", Token: "s3cret-internal"}); !errors.Is(err, ErrInternalMissing) {
		t.Fatalf("an unknown role in process: %+v, %v; want ErrInternalMissing", g, err)
	}
}
