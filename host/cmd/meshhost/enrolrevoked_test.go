package main

import (
	"fmt"
	"hash/crc32"
	"strings"
	"testing"
	"time"

	"mesh/host/agent"
)

// TestEnrolOverARevokedIdentityIsRefusedAtOnce (a walkthrough): enrol with a new
// token of the same node id into the state directory of a node the mesh revoked
// asked the mesh again with the revoked key, was refused the login, and advised
// waiting a minute, running enrol again with the same token and having the node
// revoked (it was). The agent's record of the signed notice is read first: exit 5,
// nothing dialled, the state directory to remove named, the token kept.
func TestEnrolOverARevokedIdentityIsRefusedAtOnce(t *testing.T) {
	dir, id := enrolled(t)
	// A token of the identity's mesh, node and CA pin: without the record, enrol
	// asks the mesh (10.0.0.1:7300) whether this token admitted the key.
	signed := "mesh1_demo_10.0.0.1:7300_" + id.CAPin + "_" + strings.Repeat("cd", 32) + "_" + id.Node + "_worker_1900000000_" + strings.Repeat("5e", 32)
	tok := fmt.Sprintf("%s_%08x", signed, crc32.Checksum([]byte(signed), crc32.MakeTable(crc32.Castagnoli)))
	if err := recordRevocation(dir, id, agent.ErrRevoked, time.Now()); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runCLI(tok+"\n", nil, "enrol", "--state", dir, "--timeout", "3s")
	if code != exitIdentity {
		t.Fatalf("exit %d, want %d\n%s%s", code, exitIdentity, out, stderr)
	}
	for _, want := range []string{"which the mesh revoked", "remove the state directory " + dir, "run enrol again with the token"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(out, "connect") || strings.Contains(stderr, "did not confirm") {
		t.Errorf("the mesh was asked:\n%s%s", out, stderr)
	}
}
