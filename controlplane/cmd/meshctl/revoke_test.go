package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/api"
)

// TestARevocationSaysWhichMachine (audit of commands run twice, finding 6): `revoke
// web-3` run again after a new machine enrolled as web-3 printed "revoked web-3 (0
// connection(s) open, closed now)", word for word the first revocation's. It names
// the key revoked and when that machine enrolled, and says when the id was revoked
// before. A control plane older than --key refuses the member; meshctl says so.
func TestARevocationSaysWhichMachine(t *testing.T) {
	enrolled := time.Date(2026, 12, 6, 3, 38, 10, 0, time.UTC)
	earlier := enrolled.Add(-time.Hour)
	var b bytes.Buffer
	printRevoked(&b, api.RevokedNode{Node: "web-3", PublicKey: "UNEWKEY", EnrolledAt: enrolled, EarlierRevocations: 1, EarlierRevokedAt: earlier})
	for _, want := range []string{"revoked web-3 (key UNEWKEY, enrolled 2026-12-06T03:38:10Z; no connection open)", "web-3 was revoked once before, at 2026-12-06T02:38:10Z, under another key",
		"meshctl revoke --key KEY",
		// The whole state directory goes, as the agent's revocation message says (a
		// docs walkthrough: "its identity removed" left the node's applied
		// declaration, secrets included, on the machine).
		"needs a new token, and on the machine its state directory removed (or moved away: it holds the node's applied declaration, secrets included)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	printRevoked(&b, api.RevokedNode{Node: "web-3", PublicKey: "UNEWKEY", EnrolledAt: enrolled})
	if strings.Contains(b.String(), "before") {
		t.Errorf("a first revocation speaks of an earlier one:\n%s", b.String())
	}
	b.Reset()
	// Revoked already, its record forgotten (review 28, LOW-1): no enrolment time
	// to show, and nothing was revoked now, so no warning that it revoked a
	// machine it did not mean to.
	printRevoked(&b, api.RevokedNode{Node: "web-3", PublicKey: "UNEWKEY", AlreadyRevokedAt: enrolled, EarlierRevocations: 2})
	if want := "web-3 was already revoked (key UNEWKEY; at 2026-12-06T03:38:10Z); its key stays refused\nweb-3 was also revoked twice before that, under another key\n"; b.String() != want {
		t.Errorf("revoked already, record forgotten:\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	// An older control plane: no key, said as before.
	printRevoked(&b, api.RevokedNode{Node: "web-3", Connections: 2})
	if b.String() != "revoked web-3 (2 connection(s) open, closed now); its key is refused from now on\n" {
		t.Errorf("from an older control plane: %q", b.String())
	}

	older := &api.Error{Code: api.CodeBadRequest, Message: `not a request for this operation: args: json: unknown field "key"`}
	if err := olderKey(older); !errors.Is(err, older) || !strings.Contains(err.Error(), "cannot check --key; it revoked nothing") {
		t.Fatalf("an older control plane refusing key: %v", err)
	}
	for _, args := range [][]string{{"revoke", "--data", t.TempDir(), "--key", "UNOTAKEY", "web-3"}, {"revoke", "--data", t.TempDir(), "--key", "UNEWKEY", "web-3", "web-4"}} {
		if code, _, stderr := runCLI(args...); code != exitUsage || !strings.Contains(stderr, "--key") {
			t.Errorf("%v: exit %d: %s", args, code, stderr)
		}
	}
}

// TestGivenRepeatsTheFlagsThatNamedTheControlPlane: a command a message suggests
// (revoke's key_mismatch) carries the flags that reached the mesh, quoted for a
// shell, and nothing the environment gave.
func TestGivenRepeatsTheFlagsThatNamedTheControlPlane(t *testing.T) {
	for _, c := range []struct {
		f    controlPlaneFlags
		want string
	}{
		{controlPlaneFlags{}, ""},
		{controlPlaneFlags{dir: "./cp"}, "--data ./cp "},
		{controlPlaneFlags{dir: "/srv/my mesh"}, "--data '/srv/my mesh' "},
		{controlPlaneFlags{servers: []string{"10.0.0.1:7300", "10.0.0.2:7300"}, creds: "ops.creds", ca: "ca.pem"}, "--servers 10.0.0.1:7300,10.0.0.2:7300 --creds ops.creds --ca ca.pem "},
		{controlPlaneFlags{context: "prod"}, "--context prod "},
	} {
		if got := c.f.given(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.f, got, c.want)
		}
	}
}
