package operator

import (
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/tokenfmt"
)

// TestATokenCarriesAtMostItsBrokers: with more control nodes than a token carries
// brokers (17 and more), a mint assembled a token that did not validate, after the
// control plane had recorded it, and every mint failed, leaving a pending token
// nobody held (a review). The token carries the first tokenfmt.MaxBrokers, in the
// control plane's order; the node learns the others from its signed membership.
func TestATokenCarriesAtMostItsBrokers(t *testing.T) {
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	res := api.TokenCreateResult{Mesh: "m", CAPin: hex.EncodeToString(make([]byte, 32)), SigningKey: hex.EncodeToString(pub),
		Expiry: time.Now().Add(time.Hour)}
	res.CAPin = "01" + res.CAPin[2:]
	for i := range 20 {
		res.Brokers = append(res.Brokers, fmt.Sprintf("10.0.0.%d:7300", i+1))
	}
	var secret [tokenfmt.SecretSize]byte
	secret[0] = 1
	tok, err := TokenFrom(secret, "web-1", tokenfmt.RoleWorker, res)
	if err != nil {
		t.Fatalf("a token with 20 brokers listed: %v", err)
	}
	if len(tok.Brokers) != tokenfmt.MaxBrokers {
		t.Fatalf("the token carries %d brokers, want %d", len(tok.Brokers), tokenfmt.MaxBrokers)
	}
	for i, b := range tok.Brokers {
		if b.String() != res.Brokers[i] {
			t.Errorf("broker %d is %s, want %s (the control plane's order)", i, b, res.Brokers[i])
		}
	}
}

// TestATokenLeavesOutALinkLocalBroker: a mesh that listed an IPv6 link-local broker
// before meshctl refused one (bootstrap --advertise) kept handing it out in every
// token, and no host dials one without a zone (a review). The token carries the
// others; with none other, it carries it, as before.
func TestATokenLeavesOutALinkLocalBroker(t *testing.T) {
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	res := api.TokenCreateResult{Mesh: "m", CAPin: "01" + hex.EncodeToString(make([]byte, 31)), SigningKey: hex.EncodeToString(pub),
		Expiry: time.Now().Add(time.Hour), Brokers: []string{"[fe80::1]:7300", "10.0.0.2:7300"}}
	var secret [tokenfmt.SecretSize]byte
	secret[0] = 1
	tok, err := TokenFrom(secret, "web-1", tokenfmt.RoleWorker, res)
	if err != nil || len(tok.Brokers) != 1 || tok.Brokers[0].String() != "10.0.0.2:7300" {
		t.Fatalf("a token from brokers %v: %v, %v; want 10.0.0.2:7300 alone", res.Brokers, tok.Brokers, err)
	}
	res.Brokers = res.Brokers[:1]
	if tok, err = TokenFrom(secret, "web-1", tokenfmt.RoleWorker, res); err != nil || len(tok.Brokers) != 1 {
		t.Fatalf("a token from a link-local broker alone: %v, %v; want it carried", tok.Brokers, err)
	}
}
