package main

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"mesh/host/agent"
	"mesh/host/identity"
	"mesh/host/statedir"
)

// TestRevocationRecordThroughALinkRefused (security.md: every file read from the
// state directory, revoked.json included, is opened without following a link at
// its name): a record of this identity's revocation, read where it was written, is
// found (the positive control); the same record behind a link at revoked.json is
// refused as a link, never read.
func TestRevocationRecordThroughALinkRefused(t *testing.T) {
	id := identity.Identity{Node: "web-1", PublicKey: "UABC"}
	theirs, state := t.TempDir(), t.TempDir()
	if err := recordRevocation(theirs, id, agent.ErrRevoked, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := loadRevocation(theirs, id); !ok || err != nil {
		t.Fatalf("the record where it was written: found %v, %v", ok, err)
	}
	if err := os.Symlink(revokedPath(theirs), revokedPath(state)); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := loadRevocation(state, id); ok || !errors.Is(err, statedir.ErrSymlink) {
		t.Fatalf("the record behind a link: found %v, %v; want statedir.ErrSymlink", ok, err)
	}
}

// TestARevokedNodeIsToldToRemoveItsStateDirectory (a walkthrough): the advice was
// to remove identity.json and enrol again; the revoked node's applied declaration,
// its secrets included, then stayed in the state directory beside the next node's
// identity. The whole directory goes, as the doc says.
func TestARevokedNodeIsToldToRemoveItsStateDirectory(t *testing.T) {
	err := revocation{Signed: true, Node: "web-4", At: time.Date(2026, 12, 7, 10, 21, 36, 0, time.UTC)}.err("/var/lib/meshhost")
	if msg := err.Error(); !strings.Contains(msg, "remove the state directory /var/lib/meshhost") || strings.Contains(msg, "identity.json") {
		t.Fatalf("the revoked node's advice: %v", err)
	}
	// Refused time after time without the notice: a node the mesh no longer lists
	// is adopted again the same way (it said to remove identity.json).
	err = revocation{Node: "web-4", At: time.Date(2026, 12, 7, 10, 21, 36, 0, time.UTC)}.err("/var/lib/meshhost")
	if msg := err.Error(); !strings.Contains(msg, "does not list the node, remove the state directory /var/lib/meshhost (or move it away") || strings.Contains(msg, "identity.json") {
		t.Fatalf("the refused node's advice: %v", err)
	}
}
