package main

import (
	"fmt"
	"hash/crc32"
	"net"
	"strings"
	"testing"
	"time"

	"mesh/host/agent"
	"mesh/host/identity"
)

// revokedTestToken is a worker token of id's mesh, node and CA pin naming broker.
func revokedTestToken(id identity.Identity, broker string) string {
	return revokedTestTokenExpiring(id, broker, 1900000000)
}

// revokedTestTokenExpiring is revokedTestToken expiring at the Unix second expiry.
func revokedTestTokenExpiring(id identity.Identity, broker string, expiry int64) string {
	signed := "mesh1_" + id.Mesh + "_" + broker + "_" + id.CAPin + "_" + strings.Repeat("cd", 32) + "_" + id.Node + "_worker_" + fmt.Sprint(expiry) + "_" + strings.Repeat("5e", 32)
	return fmt.Sprintf("%s_%08x", signed, crc32.Checksum([]byte(signed), crc32.MakeTable(crc32.Castagnoli)))
}

// TestEnrolOverARevokedIdentityWithAnExpiredTokenAsksForANewOne (a walkthrough): a
// token of the revoked node itself gets past the expiry check (the identity in the
// way is the news), and the refusal said to keep it, expired for a day.
func TestEnrolOverARevokedIdentityWithAnExpiredTokenAsksForANewOne(t *testing.T) {
	dir, id := enrolled(t)
	if err := recordRevocation(dir, id, agent.ErrRevoked, time.Now()); err != nil {
		t.Fatal(err)
	}
	expired := time.Now().Add(-24 * time.Hour).Truncate(time.Second)
	code, out, stderr := runCLI(revokedTestTokenExpiring(id, closedLoopback(t), expired.Unix())+"\n", nil, "enrol", "--state", dir, "--timeout", "3s")
	if code != exitIdentity || !strings.Contains(stderr, "which the mesh revoked") {
		t.Fatalf("exit %d, want %d refusing the revoked identity:\n%s%s", code, exitIdentity, out, stderr)
	}
	for _, want := range []string{"The token has expired too (at " + expired.UTC().Format(time.RFC3339), "ask the operator for a new one", "remove the state directory " + dir, "enrol with a new token"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "Keep the token") || strings.Contains(stderr, strings.Repeat("5e", 32)) {
		t.Errorf("an expired token kept, or its secret shown:\n%s", stderr)
	}
}

// closedLoopback is a loopback address nothing listens on: a broken guard dials it
// and fails at once, never an address of the network the test runs on.
func closedLoopback(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestEnrolOverARevokedIdentityIsRefusedAtOnce (a walkthrough): enrol with a new
// token of the same node id into the state directory of a node the mesh revoked
// asked the mesh again with the revoked key, was refused the login, and advised
// waiting a minute, running enrol again with the same token and having the node
// revoked (it was). The agent's record of the signed notice is read first: exit 5,
// nothing dialled, the state directory to remove named, the token kept.
func TestEnrolOverARevokedIdentityIsRefusedAtOnce(t *testing.T) {
	dir, id := enrolled(t)
	// A token of the identity's mesh, node and CA pin: without the record, enrol
	// asks the mesh whether this token admitted the key.
	tok := revokedTestToken(id, closedLoopback(t))
	if err := recordRevocation(dir, id, agent.ErrRevoked, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, asJSON := range []bool{false, true} {
		args := []string{"enrol", "--state", dir, "--timeout", "3s"}
		if asJSON {
			args = append(args, "--json")
		}
		code, out, stderr := runCLI(tok+"\n", nil, args...)
		if code != exitIdentity {
			t.Fatalf("json %t: exit %d, want %d\n%s%s", asJSON, code, exitIdentity, out, stderr)
		}
		for _, want := range []string{"meshhost enrol: this machine is already enrolled: " + dir, "which the mesh revoked", "remove the state directory " + dir, "run enrol again with the token"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("json %t: the refusal does not say %q:\n%s", asJSON, want, stderr)
			}
		}
		if out != "" || strings.Contains(stderr, "connect") || strings.Contains(stderr, "did not confirm") || strings.Contains(stderr, strings.Repeat("5e", 32)) {
			t.Errorf("json %t: the mesh was asked, or stdout written, or the secret shown:\n%s%s", asJSON, out, stderr)
		}
	}
}

// TestEnrolOverAnIdentityNotKnownRevokedAsksTheMesh: only the mesh's signed notice,
// about the identity in the directory, refuses enrol at once. A record of refusals
// alone (the key perhaps still the mesh's: a full control node) or of an identity
// enrolled there before leaves enrol to ask the mesh as it did.
func TestEnrolOverAnIdentityNotKnownRevokedAsksTheMesh(t *testing.T) {
	for name, record := range map[string]func(dir string, id identity.Identity) error{
		"refusals": func(dir string, id identity.Identity) error {
			return recordRevocation(dir, id, agent.ErrIdentityRefused, time.Now())
		},
		"an earlier identity": func(dir string, id identity.Identity) error {
			id.PublicKey = "UEARLIERKEY"
			return recordRevocation(dir, id, agent.ErrRevoked, time.Now())
		},
	} {
		dir, id := enrolled(t)
		if err := record(dir, id); err != nil {
			t.Fatal(err)
		}
		code, out, stderr := runCLI(revokedTestToken(id, closedLoopback(t))+"\n", nil, "enrol", "--state", dir, "--timeout", "1s")
		if code != exitIdentity || strings.Contains(stderr, "which the mesh revoked") || !strings.Contains(out, "asking the mesh whether this token admitted its key") {
			t.Errorf("%s: exit %d, want 5 after asking the mesh:\n%s%s", name, code, out, stderr)
		}
	}
}
