package identity

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
)

// The node's key pair must give exactly what nkeys' own gives for the same seed:
// the broker verifies its signatures with nkeys, and the identity file keeps the seed.
func TestKeyPairMatchesNkeys(t *testing.T) {
	kp, err := NewKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	ref, err := nkeys.FromSeed(seed)
	if err != nil {
		t.Fatalf("nkeys does not read the seed NewKeyPair made: %v", err)
	}
	pub, _ := kp.PublicKey()
	refPub, _ := ref.PublicKey()
	if pub != refPub || !nkeys.IsValidPublicUserKey(pub) {
		t.Fatalf("public key %s, nkeys says %s", pub, refPub)
	}
	nonce := []byte("a server's nonce")
	sig, err := kp.Sign(nonce)
	if err != nil {
		t.Fatal(err)
	}
	verifier, _ := nkeys.FromPublicKey(pub)
	if err := verifier.Verify(nonce, sig); err != nil {
		t.Fatalf("nkeys does not verify the signature: %v", err)
	}
	refSig, _ := ref.Sign(nonce)
	if string(sig) != string(refSig) {
		t.Fatal("the signature differs from nkeys' for the same seed and input (Ed25519 is deterministic)")
	}
	if err := kp.Verify(nonce, sig); err != nil {
		t.Fatal(err)
	}
	if err := kp.Verify([]byte("another"), sig); !errors.Is(err, nkeys.ErrInvalidSignature) {
		t.Fatalf("a signature over other bytes: %v", err)
	}

	again, err := userKeyPair(string(seed))
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := again.PublicKey(); p != pub {
		t.Fatalf("the seed read back gives %s, want %s", p, pub)
	}
}

func TestKeyPairRefusesOtherSeeds(t *testing.T) {
	account, _ := nkeys.CreateAccount()
	accountSeed, _ := account.Seed()
	user, _ := nkeys.CreateUser()
	userSeed, _ := user.Seed()
	for name, seed := range map[string]string{
		"empty":     "",
		"account":   string(accountSeed),
		"truncated": string(userSeed[:len(userSeed)-4]),
		"garbage":   "SUAXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX",
		"public":    func() string { p, _ := user.PublicKey(); return p }(),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := userKeyPair(seed)
			var inv *InvalidError
			if !errors.As(err, &inv) || inv.Field != "nkey_seed" {
				t.Fatalf("got %v, want an *InvalidError on nkey_seed", err)
			}
			if seed != "" && strings.Contains(err.Error(), seed) {
				t.Fatal("the error quotes the seed")
			}
		})
	}
}

func TestWipedKeyPairIsUnusable(t *testing.T) {
	kp, err := NewKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	kp.Wipe()
	if _, err := kp.Sign([]byte("x")); err == nil {
		t.Fatal("a wiped key pair still signs")
	}
	if _, err := kp.PublicKey(); err == nil {
		t.Fatal("a wiped key pair still answers its public key")
	}
	if s, err := kp.Seed(); err == nil || s != nil {
		t.Fatal("a wiped key pair still gives its seed")
	}
	for _, b := range seed {
		if b != 0 {
			t.Fatal("Wipe left the seed's bytes in memory")
		}
	}
}

// What a host pays to sign a broker's nonce, beside nkeys' own key pair, which
// derives the key from the seed again on every call.
func BenchmarkSignNonce(b *testing.B) {
	kp, err := NewKeyPair()
	if err != nil {
		b.Fatal(err)
	}
	seed, _ := kp.Seed()
	ref, _ := nkeys.FromSeed(seed)
	nonce := []byte("HBCGI6YQ2BZOJ2RH3XIV7Q")
	b.Run("identity.KeyPair", func(b *testing.B) {
		for b.Loop() {
			if _, err := kp.Sign(nonce); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("nkeys.KeyPair", func(b *testing.B) {
		for b.Loop() {
			if _, err := ref.Sign(nonce); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A key pair formatted every way a log line might shows its public key, never its
// seed or private key.
func TestKeyPairNeverPrintsItsSecret(t *testing.T) {
	kp, err := NewKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	secrets := []string{string(seed), fmt.Sprint(kp.priv), fmt.Sprint(seed), fmt.Sprintf("%x", kp.priv[:32])}
	outs := printedEveryWay(t, []any{kp, *kp, struct{ K *KeyPair }{kp}, []KeyPair{*kp}}, "key", kp, "value", *kp)
	pub, _ := kp.PublicKey()
	for _, out := range outs {
		for _, s := range secrets {
			if strings.Contains(out, s) {
				t.Fatalf("output shows the key pair's secret: %s", out)
			}
		}
		if !strings.Contains(out, pub) && !strings.Contains(out, fmt.Sprintf("%x", pub)) {
			t.Fatalf("output lost the public key: %s", out)
		}
	}
}
