package enrol

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"mesh/host/identity"
	"mesh/host/wire"
)

// TestARunStoppedAfterItRemovedItsDraftKeyIsFinished: a run of enrol stopped after
// it saved the identity and removed its draft key, before it said "enrolled" (a
// kill), is run again with the same token: the mesh, asked again with the
// identity's key, answers the repeat, and the rerun says enrolled (it told the
// operator to have a healthy node revoked). When the mesh refuses that key with the
// token, the machine stays "already enrolled".
func TestARunStoppedAfterItRemovedItsDraftKeyIsFinished(t *testing.T) {
	var refuse atomic.Bool
	m := newFakeMesh(t, func(r *wire.EnrolResponse) {
		if refuse.Load() {
			*r = wire.EnrolResponse{V: wire.ProtocolVersion, Error: &wire.Error{Code: wire.CodeTokenUsed, Message: "this token already enrolled a node"}}
		}
	})
	dir, first, err := enrolWith(t, m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := identity.LoadPending(dir); err == nil {
		t.Fatal("the draft key is still there after a finished enrolment")
	}
	var out strings.Builder
	res, err := Enrol(context.Background(), Options{StateDir: dir, Token: m.token, Out: &out, DialTimeout: 5 * time.Second, RequestTimeout: 5 * time.Second})
	if err != nil || !res.Finished || res.Identity.PublicKey != first.Identity.PublicKey {
		t.Fatalf("the rerun: %+v, %v, want the earlier run's enrolment finished\n%s", res, err, out.String())
	}
	if !strings.Contains(out.String(), "the mesh admitted this key with this token") {
		t.Errorf("the rerun does not say how it knows:\n%s", out.String())
	}
	refuse.Store(true)
	if _, err := Enrol(context.Background(), Options{StateDir: dir, Token: m.token, DialTimeout: 5 * time.Second, RequestTimeout: 5 * time.Second}); !errors.Is(err, identity.ErrAlreadyEnrolled) {
		t.Fatalf("the mesh refusing the identity's key: %v, want already enrolled", err)
	}
}

// TestNodeExistsSaysWhatToDo: refused node_exists (another machine holds the node),
// the pending key goes, and the output says what replaces that machine: a revocation
// and a new token. It once advised the same token after the revocation, which
// cancels it (and, on control planes before that, deleted it).
func TestNodeExistsSaysWhatToDo(t *testing.T) {
	m := newFakeMesh(t, func(r *wire.EnrolResponse) {
		*r = wire.EnrolResponse{V: wire.ProtocolVersion, Error: &wire.Error{Code: wire.CodeNodeExists, Message: "node web-1 is enrolled"}}
	})
	var out strings.Builder
	_, err := Enrol(context.Background(), Options{StateDir: t.TempDir() + "/state", Token: m.token, Out: &out, DialTimeout: 5 * time.Second, RequestTimeout: 5 * time.Second})
	var re *RefusedError
	if !errors.As(err, &re) || re.Code != wire.CodeNodeExists {
		t.Fatalf("got %v, want node_exists", err)
	}
	if strings.Contains(out.String(), "for good") || !strings.Contains(out.String(), "the operator revokes that node and mints a new token for this one") {
		t.Fatalf("the output calls the token spent, or does not say what to do:\n%s", out.String())
	}
}

// TestARunAgainOnTheTokensNodeSaysSo: enrol run again on a machine its earlier run
// enrolled (a provisioning script's every run), when the mesh does not confirm the
// token admitted the identity's key (here: the signing key was retired since, so
// the token is stale; and a day after the token expired, when the mesh no longer
// keeps it): the identity is said to be that of the node the token names, with the
// mesh's reason, and where to look (meshhost status). Before, every such rerun was
// told to have an operator revoke the node, a healthy one, and a token expired long
// ago was refused as expired ("ask for a new one"). An identity of another node
// is still the machine to revoke first.
func TestARunAgainOnTheTokensNodeSaysSo(t *testing.T) {
	var refuse atomic.Bool
	m := newFakeMesh(t, func(r *wire.EnrolResponse) {
		if refuse.Load() {
			*r = wire.EnrolResponse{V: wire.ProtocolVersion, Error: &wire.Error{Code: wire.CodeTokenStaleKey, Message: "the token's signing key was retired"}}
		}
	})
	dir, first, err := enrolWith(t, m)
	if err != nil {
		t.Fatal(err)
	}
	refuse.Store(true)
	_, err = Enrol(context.Background(), Options{StateDir: dir, Token: m.token, DialTimeout: 5 * time.Second, RequestTimeout: 5 * time.Second})
	var as *EnrolledAsTokenError
	if !errors.As(err, &as) || !errors.Is(err, identity.ErrAlreadyEnrolled) || as.Node != first.Identity.Node {
		t.Fatalf("got %v, want the identity of the token's node said as such", err)
	}
	// To enrol afresh, the whole state directory goes (a docs walkthrough: the advice
	// named identity.json alone, and the node's applied declaration, secrets
	// included, stayed beside the next enrolment's identity).
	for _, want := range []string{"the node this token names", "token_stale_key", "meshhost status", "If this enrolment ran here before, it is done",
		"have an operator revoke the node first, then remove the state directory " + dir + " (or move it away"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the rerun does not say %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "remove "+identity.Path(dir)) {
		t.Errorf("the rerun advises removing the identity file alone:\n%v", err)
	}

	// Two days on: refused offline as expired no more, and the mesh is asked (its
	// certificates are not valid by then either: the reason says so).
	later := func() time.Time { return time.Now().Add(48 * time.Hour) }
	if _, err := ParseToken(m.token, later(), dir); err != nil {
		t.Fatalf("a token expired long ago, on the machine it enrolled: %v", err)
	}
	if _, err := ParseToken(m.token, later(), t.TempDir()); !errors.Is(err, ErrToken) {
		t.Fatalf("a token expired long ago, on another machine: %v, want refused offline", err)
	}
	_, err = Enrol(context.Background(), Options{StateDir: dir, Token: m.token, Now: later, DialTimeout: 5 * time.Second, RequestTimeout: 5 * time.Second})
	if !errors.As(err, &as) {
		t.Fatalf("two days on: got %v, want the identity of the token's node said as such", err)
	}

	// An identity of another node: the machine to revoke first, as before.
	other := first.Identity
	other.Node = "db-1"
	if err := os.Remove(identity.Path(dir)); err != nil {
		t.Fatal(err)
	}
	if err := identity.Save(dir, other); err != nil {
		t.Fatal(err)
	}
	_, err = Enrol(context.Background(), Options{StateDir: dir, Token: m.token, DialTimeout: 5 * time.Second, RequestTimeout: 5 * time.Second})
	if !errors.Is(err, identity.ErrAlreadyEnrolled) || errors.As(err, &as) || !strings.Contains(err.Error(), "revoke it first, then remove the state directory "+dir) {
		t.Fatalf("another node's identity: got %v, want already enrolled, revoke it first, then remove the state directory", err)
	}
}
