package main

import (
	"errors"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/tokenfmt"
)

// fullDisk refuses every write as a full disk does.
type fullDisk struct{}

func (fullDisk) Write([]byte) (int, error) { return 0, syscall.ENOSPC }

// TestATokenNotWrittenIsSaidMinted: `meshctl token > file` on a full disk exited 1
// with "write /dev/stdout: no space left on device"; the token was minted and
// stayed pending with a secret no one holds, which the error did not say. It says
// so now, and how to cancel it, without the token's text.
func TestATokenNotWrittenIsSaidMinted(t *testing.T) {
	tok := tokenfmt.Token{Mesh: "m", Node: "web-1", Role: tokenfmt.RoleWorker, Expiry: time.Now().Add(15 * time.Minute),
		Brokers: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:7300")}}
	tok.Secret[0] = 0x5a
	for _, asJSON := range []bool{false, true} {
		err := printToken(&cliIO{stdout: fullDisk{}}, tok, nil, asJSON, nil)
		if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "was minted") || !strings.Contains(err.Error(), "meshctl token cancel web-1") {
			t.Fatalf("json %t: got %v, want the write's error saying the token was minted and how to cancel it", asJSON, err)
		}
		if strings.Contains(err.Error(), tok.Encode()) || tokenfmt.HoldsToken(err.Error()) {
			t.Fatalf("json %t: the error holds the token", asJSON)
		}
	}
}

// TestAnOlderControlPlaneRefusingReplace: a control plane older than --replace reads
// the request strictly and refuses its replace member with the decoder's words
// alone; meshctl says what happened and what to do instead. Other refusals pass.
func TestAnOlderControlPlaneRefusingReplace(t *testing.T) {
	older := &api.Error{Code: api.CodeBadRequest, Message: `not a request for this operation: args: json: unknown field "replace"`}
	err := olderReplace(older, "web-1")
	if !errors.Is(err, older) || !strings.Contains(err.Error(), "older than this meshctl") || !strings.Contains(err.Error(), "meshctl token cancel web-1") {
		t.Fatalf("%v", err)
	}
	other := &api.Error{Code: api.CodeTokenPending, Message: "a token for this node is pending"}
	if got := olderReplace(other, "web-1"); got != error(other) {
		t.Fatalf("another refusal became %v", got)
	}
}

// TestAnOlderControlPlaneRefusingTheClaimExpiry: a leader older than the control
// token's claim version 2 refuses its claim_expiry member with the decoder's words
// alone; meshctl says nothing was minted and to upgrade the control nodes first.
// Other refusals pass.
func TestAnOlderControlPlaneRefusingTheClaimExpiry(t *testing.T) {
	older := &api.Error{Code: api.CodeBadRequest, Message: `not a request for this operation: args: json: unknown field "claim_expiry"`}
	err := olderClaim(older)
	if !errors.Is(err, older) || !strings.Contains(err.Error(), "nothing was minted") || !strings.Contains(err.Error(), "upgrade every control node") {
		t.Fatalf("%v", err)
	}
	other := &api.Error{Code: api.CodeBadRequest, Message: `not a request for this operation: args: json: unknown field "replace"`}
	if got := olderClaim(other); got != error(other) {
		t.Fatalf("another refusal became %v", got)
	}
}
