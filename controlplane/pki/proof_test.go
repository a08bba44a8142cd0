package pki

import (
	"errors"
	"testing"
	"time"
)

// TestControlClaim: a claim signed by the CA verifies; any field changed (the token's
// proof key, its sealed identity and the expiry included), another CA's signature, or
// no signature at all is ErrBadControlProof.
func TestControlClaim(t *testing.T) {
	ca, other := newCA(t, "m"), newCA(t, "m")
	claim := ControlClaim{Mesh: "m", TokenID: "00ff", Node: "cp-2", Broker: "10.0.0.2:7300", Raft: "10.0.0.2:7301",
		Cluster: "10.0.0.2:7302", Pin: LeafPin(parse(t, leafOf(t, ca, "control cp-2").CertPEM)), Operator: "UABC",
		ProofKey: "aa01", SealedSum: SealedSum([]byte("sealed")), Expiry: time.Unix(1_800_000_000, 0)}
	sig, err := ca.SignControlClaim(claim)
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyControlClaim(ca.Cert, claim, sig); err != nil {
		t.Fatalf("the CA's own claim: %v", err)
	}
	changed := []func(*ControlClaim){
		func(c *ControlClaim) { c.Mesh = "n" },
		func(c *ControlClaim) { c.TokenID = "00fe" },
		func(c *ControlClaim) { c.Node = "cp-3" },
		func(c *ControlClaim) { c.Broker = "10.0.0.9:7300" },
		func(c *ControlClaim) { c.Raft = "10.0.0.9:7301" },
		func(c *ControlClaim) { c.Cluster = "10.0.0.9:7302" },
		func(c *ControlClaim) { c.Pin = "00" },
		func(c *ControlClaim) { c.Operator = "UXYZ" },
		func(c *ControlClaim) { c.ProofKey = "aa02" },
		func(c *ControlClaim) { c.SealedSum = SealedSum([]byte("sealed to another")) },
		func(c *ControlClaim) { c.Expiry = c.Expiry.Add(time.Second) },
		// Fields are length-prefixed: moving a character across a boundary changes the claim.
		func(c *ControlClaim) { c.Node, c.Broker = "cp-21", "0.0.0.2:7300" },
	}
	for i, change := range changed {
		c := claim
		change(&c)
		if err := VerifyControlClaim(ca.Cert, c, sig); !errors.Is(err, ErrBadControlProof) {
			t.Errorf("change %d: %v, want ErrBadControlProof", i, err)
		}
	}
	otherSig, _ := other.SignControlClaim(claim)
	for name, s := range map[string][]byte{"another CA's": otherSig, "none": nil, "garbage": []byte("not a signature"), "truncated": sig[:len(sig)-1]} {
		if err := VerifyControlClaim(ca.Cert, claim, s); !errors.Is(err, ErrBadControlProof) {
			t.Errorf("%s signature: %v, want ErrBadControlProof", name, err)
		}
	}
}

// TestLeafPin is the form nats-server's pinned certificates take: 64 hex digits of
// the SPKI's SHA-256, the same as PinOf.
func TestLeafPin(t *testing.T) {
	ca := newCA(t, "m")
	l := leafOf(t, ca, "control cp-1")
	pin, err := LeafPinPEM(l.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	p := PinOf(parse(t, l.CertPEM))
	if len(pin) != 64 || pin != LeafPin(parse(t, l.CertPEM)) || pin[:2] != hexByte(p[0]) {
		t.Fatalf("pin %q", pin)
	}
	if _, err := LeafPinPEM([]byte("not PEM")); err == nil {
		t.Fatal("a non-PEM certificate gave a pin")
	}
}

func hexByte(b byte) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[b>>4], digits[b&15]})
}
