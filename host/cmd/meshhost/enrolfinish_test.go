package main

import (
	"encoding/hex"
	"testing"
	"time"

	"mesh/host/agent"
	"mesh/host/enrol"
	"mesh/host/identity"
)

// TestEnrolFinishingAnEarlierRunKeepsItsRevocation: `meshhost enrol` run again to
// finish an enrolment whose identity was saved (its draft key left beside it)
// dials nothing and succeeds; it used to remove revoked.json as a record about an
// identity enrolled before, and this one is that identity: revoked since (the agent
// ran), it would have looked enrolled and well. The record stays, and status still
// exits 6.
func TestEnrolFinishingAnEarlierRunKeepsItsRevocation(t *testing.T) {
	tok, _ := realToken(t)
	parsed, err := enrol.ParseToken(tok, time.Now(), "")
	if err != nil {
		t.Fatal(err)
	}
	_, id := enrolled(t)
	id.Node = parsed.Node
	id.Subjects = identity.Subjects{Declarations: "mesh.node." + id.Node + ".decl", Status: "mesh.node." + id.Node + ".status",
		Sync: "mesh.node." + id.Node + ".sync", InboxPrefix: "_INBOX.node." + id.Node}
	dir := t.TempDir()
	if err := identity.Save(dir, id); err != nil {
		t.Fatal(err)
	}
	th := parsed.SecretHash()
	if err := identity.SavePending(dir, identity.Pending{Format: 1, Mesh: id.Mesh, Node: id.Node, TokenHash: hex.EncodeToString(th[:]),
		Seed: id.Seed, CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	if err := recordRevocation(dir, id, &agent.RevokedError{At: time.Now().Add(-time.Minute)}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if code, out, stderr := runCLI(tok, nil, "enrol", "--state", dir); code != exitOK {
		t.Fatalf("enrol finishing the earlier run: exit %d\n%s%s", code, out, stderr)
	}
	if code, out, stderr := runCLI("", nil, "status", "--state", dir); code != exitRevoked {
		t.Fatalf("status after: exit %d, want %d (the revocation kept)\n%s%s", code, exitRevoked, out, stderr)
	}
}
