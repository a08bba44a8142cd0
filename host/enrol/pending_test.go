package enrol

import (
	"context"
	"encoding/hex"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"mesh/host/identity"
	"mesh/host/wire"
)

// refuse answers every enrolment with the refusal code.
func refuse(code string) func(*wire.EnrolResponse) {
	return func(r *wire.EnrolResponse) {
		*r = wire.EnrolResponse{V: wire.ProtocolVersion, Error: &wire.Error{Code: code, Message: "refused by the test"}}
	}
}

// TestARefusalForGoodDropsThePendingKey: when the mesh answers the request with a
// refusal that running enrol again cannot cure (the token used, expired, unknown,
// cancelled, the key revoked), the pending key is removed: it can never be used, and
// its file had meshhost status advise running enrol again with the same token, which
// cannot work. Whenever the same token may still finish the enrolment with that key
// (the mesh unavailable or failing internally, the answer lost), the key is kept, and
// the next attempt presents it.
func TestARefusalForGoodDropsThePendingKey(t *testing.T) {
	pendingAfter := func(t *testing.T, change func(*wire.EnrolResponse), timeout time.Duration) (string, error) {
		t.Helper()
		m := newFakeMesh(t, change)
		dir := filepath.Join(t.TempDir(), "state")
		_, err := Enrol(context.Background(), Options{StateDir: dir, Token: m.token, DialTimeout: 5 * time.Second, RequestTimeout: timeout})
		if err == nil {
			t.Fatal("the enrolment succeeded")
		}
		if _, ierr := identity.Load(dir); !errors.Is(ierr, identity.ErrNotEnrolled) {
			t.Fatalf("after %v the identity is %v, want none", err, ierr)
		}
		return dir, err
	}
	for _, code := range []string{wire.CodeTokenUsed, wire.CodeTokenExpired, wire.CodeTokenUnknown, wire.CodeTokenCancelled,
		wire.CodeKeyRevoked, wire.CodeTokenOtherNode, wire.CodeNodeExists, wire.CodeKeyInUse} {
		t.Run(code, func(t *testing.T) {
			dir, err := pendingAfter(t, refuse(code), 5*time.Second)
			var re *RefusedError
			if !errors.As(err, &re) || re.Code != code || re.Retryable() {
				t.Fatalf("got %v, want the refusal %s", err, code)
			}
			if _, perr := identity.LoadPending(dir); !errors.Is(perr, identity.ErrNoPending) {
				t.Fatalf("the key of a token refused for good is still pending: %v", perr)
			}
		})
	}
	for name, c := range map[string]struct {
		change  func(*wire.EnrolResponse)
		timeout time.Duration
		want    error
	}{
		wire.CodeUnavailable: {refuse(wire.CodeUnavailable), 5 * time.Second, ErrRefused},
		wire.CodeInternal:    {refuse(wire.CodeInternal), 5 * time.Second, ErrRefused},
		"the answer lost":    {func(r *wire.EnrolResponse) { *r = wire.EnrolResponse{} }, time.Second, ErrNoAnswer},
	} {
		t.Run(name, func(t *testing.T) {
			dir, err := pendingAfter(t, c.change, c.timeout)
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			if _, perr := identity.LoadPending(dir); perr != nil {
				t.Fatalf("the key the mesh may have recorded was dropped: %v", perr)
			}
		})
	}
	t.Run("internal, then used", func(t *testing.T) {
		// The next attempt with the same token presents the kept key; the mesh's
		// refusal for good then drops it.
		answers := 0
		m := newFakeMesh(t, func(r *wire.EnrolResponse) {
			answers++
			if answers == 1 {
				refuse(wire.CodeInternal)(r)
			} else {
				refuse(wire.CodeTokenUsed)(r)
			}
		})
		dir := filepath.Join(t.TempDir(), "state")
		var out strings.Builder
		o := Options{StateDir: dir, Token: m.token, Out: &out, DialTimeout: 5 * time.Second, RequestTimeout: 5 * time.Second}
		if _, err := Enrol(context.Background(), o); !errors.Is(err, ErrRefused) {
			t.Fatalf("first attempt: %v", err)
		}
		p, err := identity.LoadPending(dir)
		if err != nil {
			t.Fatalf("first attempt, internal: %v", err)
		}
		kp, _ := p.KeyPair()
		pub, _ := kp.PublicKey()
		out.Reset()
		var re *RefusedError
		if _, err := Enrol(context.Background(), o); !errors.As(err, &re) || re.Code != wire.CodeTokenUsed {
			t.Fatalf("second attempt: %v", err)
		}
		if !strings.Contains(out.String(), "reusing the key of the unfinished enrolment "+pub) || !strings.Contains(out.String(), "removed the pending key "+pub) {
			t.Fatalf("the second attempt did not present the kept key, then say it removed it:\n%s", out.String())
		}
		if _, err := identity.LoadPending(dir); !errors.Is(err, identity.ErrNoPending) {
			t.Fatalf("after token_used the key is still pending: %v", err)
		}
	})
}

// TestAnEnrolmentSavedByAnEarlierRunIsFinished: a run that saved the identity and
// failed as the directory was flushed (or as it removed its draft key) said to run
// enrol again; run again, it was told the machine was enrolled already, to be
// revoked, though `meshhost run` worked. Run again with the same token, it finds
// its own identity beside its draft key, removes the draft and succeeds, without
// dialling the mesh. An identity beside another token's draft, or none, is refused
// as enrolled when the mesh does not confirm that this token admitted its key
// (TestARunStoppedAfterItRemovedItsDraftKeyIsFinished: when it does, it is finished).
func TestAnEnrolmentSavedByAnEarlierRunIsFinished(t *testing.T) {
	var refuse atomic.Bool
	m := newFakeMesh(t, func(r *wire.EnrolResponse) {
		if refuse.Load() {
			*r = wire.EnrolResponse{V: wire.ProtocolVersion, Error: &wire.Error{Code: wire.CodeTokenUsed, Message: "this token already enrolled a node"}}
		}
	})
	dir := filepath.Join(t.TempDir(), "state")
	res, err := Enrol(context.Background(), Options{StateDir: dir, Token: m.token, DialTimeout: 5 * time.Second, RequestTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := ParseToken(m.token, time.Now(), "")
	if err != nil {
		t.Fatal(err)
	}
	th := tok.SecretHash()
	draft := func(tokenHash string) {
		t.Helper()
		if err := identity.SavePending(dir, identity.Pending{Format: 1, Mesh: res.Identity.Mesh, Node: res.Identity.Node,
			TokenHash: tokenHash, Seed: res.Identity.Seed, CreatedAt: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
	}
	draft(hex.EncodeToString(th[:]))
	var out strings.Builder
	again, err := Enrol(context.Background(), Options{StateDir: dir, Token: m.token, Out: &out, DialTimeout: time.Second, RequestTimeout: time.Second})
	if err != nil || !again.Finished || again.Identity.PublicKey != res.Identity.PublicKey || !strings.Contains(out.String(), "by an earlier run of this enrolment") {
		t.Fatalf("run again beside its own draft key: %v, %q\n%s", err, again.Identity.PublicKey, out.String())
	}
	if _, err := identity.LoadPending(dir); !errors.Is(err, identity.ErrNoPending) {
		t.Fatalf("the draft key is still there: %v", err)
	}
	refuse.Store(true)
	for name, setup := range map[string]func(){
		"no draft key":              func() {},
		"another token's draft key": func() { draft(strings.Repeat("0", 64)) },
	} {
		setup()
		if _, err := Enrol(context.Background(), Options{StateDir: dir, Token: m.token, DialTimeout: time.Second, RequestTimeout: time.Second}); !errors.Is(err, identity.ErrAlreadyEnrolled) {
			t.Fatalf("%s: got %v, want ErrAlreadyEnrolled", name, err)
		}
	}
}
