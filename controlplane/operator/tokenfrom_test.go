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
