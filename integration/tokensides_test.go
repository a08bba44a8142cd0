package integration

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	hosttoken "mesh/host/token"
	"mesh/tokenfmt"
)

// TestTokenSidesAgree holds the two independent token definitions together beyond the
// golden vectors: the same field order, byte-identical golden files, and the host
// parsing exactly what the control plane mints.
func TestTokenSidesAgree(t *testing.T) {
	if !slices.Equal(tokenfmt.Fields(), hosttoken.Fields()) {
		t.Fatalf("field order differs: control plane %v, host %v", tokenfmt.Fields(), hosttoken.Fields())
	}
	a, err := os.ReadFile("../tokenfmt/testdata/golden.json")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("../host/token/testdata/golden.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatal("the two golden token files differ")
	}
	now := time.Now()
	for i := range 300 {
		pub, _, _ := ed25519.GenerateKey(rand.Reader)
		var pin [32]byte
		rand.Read(pin[:])
		role := tokenfmt.RoleWorker
		if i%3 == 0 {
			role = tokenfmt.RoleControl
		}
		brokers := []netip.AddrPort{netip.MustParseAddrPort("10.0.0.1:7300")}
		if i%2 == 0 {
			brokers = append(brokers, netip.MustParseAddrPort("[2001:db8::7]:7300"))
		}
		minted, err := tokenfmt.Mint(tokenfmt.MintOptions{Mesh: "m-1", Brokers: brokers, CAPin: pin, SigningKey: pub, Node: "n-1", Role: role, TTL: time.Duration(1+i%3600) * time.Second, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		text := minted.Encode()
		got, err := hosttoken.Parse(text, now)
		if err != nil {
			t.Fatalf("the host refuses a minted token: %v", err)
		}
		if got.Mesh != minted.Mesh || got.Node != minted.Node || string(got.Role) != string(minted.Role) ||
			!slices.Equal(got.Brokers, minted.Brokers) || got.CAPin != minted.CAPin || !got.SigningKey.Equal(minted.SigningKey) ||
			!got.Expiry.Equal(minted.Expiry) || got.Secret != minted.Secret || got.SecretHash() != minted.SecretHash() {
			t.Fatalf("the host read %v from what the control plane minted as %v", got, minted)
		}
		// Damage it the same way on both sides: both must fail with the same kind.
		cut := text[:len(text)-1-i%40]
		_, e1 := tokenfmt.Parse(cut, now)
		_, e2 := hosttoken.Parse(cut, now)
		if (e1 == nil) != (e2 == nil) || errors.Is(e1, tokenfmt.ErrTruncated) != errors.Is(e2, hosttoken.ErrTruncated) ||
			errors.Is(e1, tokenfmt.ErrChecksum) != errors.Is(e2, hosttoken.ErrChecksum) {
			t.Fatalf("the sides disagree on a damaged token: control plane %v, host %v", e1, e2)
		}
	}
}
