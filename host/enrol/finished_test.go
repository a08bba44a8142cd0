package enrol

import (
	"context"
	"errors"
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
