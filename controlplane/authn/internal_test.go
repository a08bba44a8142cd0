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
// TLS was granted the role it named.
func TestInternalTokenOnlyInProcess(t *testing.T) {
	fx := newFixture(t)
	a := fx.auth("s3cret-internal")
	for _, role := range []Role{RoleHosts, RolePublisher, RoleAdmin, RoleControl, RoleEvents} {
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
}
