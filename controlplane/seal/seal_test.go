package seal

import (
	"bytes"
	"crypto/rand"
	"errors"
	"testing"

	"github.com/nats-io/nkeys"
)

func TestIdentityRoundTripAndRefusals(t *testing.T) {
	var secret, other [32]byte
	rand.Read(secret[:])
	rand.Read(other[:])
	id := ControlIdentity{CertPEM: []byte("cert"), KeyPEM: []byte("key"), Creds: []byte("creds")}
	blob, err := Identity(secret, "demo", "cp-2", id)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(blob, []byte("key")) || bytes.Contains(blob, []byte("creds")) {
		t.Fatal("the sealed blob shows its content")
	}
	got, err := OpenIdentity(secret, "demo", "cp-2", blob)
	if err != nil || string(got.KeyPEM) != "key" || string(got.Creds) != "creds" {
		t.Fatalf("open: %+v, %v", got, err)
	}
	tampered := bytes.Clone(blob)
	tampered[len(tampered)-1] ^= 1
	for name, open := range map[string]func() error{
		"other secret": func() error { _, err := OpenIdentity(other, "demo", "cp-2", blob); return err },
		"other node":   func() error { _, err := OpenIdentity(secret, "demo", "cp-3", blob); return err },
		"other mesh":   func() error { _, err := OpenIdentity(secret, "prod", "cp-2", blob); return err },
		"tampered":     func() error { _, err := OpenIdentity(secret, "demo", "cp-2", tampered); return err },
		"truncated":    func() error { _, err := OpenIdentity(secret, "demo", "cp-2", blob[:10]); return err },
		"empty":        func() error { _, err := OpenIdentity(secret, "demo", "cp-2", nil); return err },
	} {
		if err := open(); !errors.Is(err, ErrOpen) {
			t.Errorf("%s: %v, want ErrOpen", name, err)
		}
	}
}

func TestCurveKeyHandOver(t *testing.T) {
	joiner, _ := nkeys.CreateCurveKeys()
	pub, _ := joiner.PublicKey()
	blob, sender, err := ToCurveKey([]byte("signing key"), pub)
	if err != nil {
		t.Fatal(err)
	}
	got, err := FromCurveKey(joiner, blob, sender)
	if err != nil || string(got) != "signing key" {
		t.Fatalf("%q %v", got, err)
	}
	eve, _ := nkeys.CreateCurveKeys()
	if _, err := FromCurveKey(eve, blob, sender); err == nil {
		t.Fatal("another curve key opened the signing key")
	}
	if _, _, err := ToCurveKey([]byte("x"), "UABC"); err == nil {
		t.Fatal("sealed to a non-curve key")
	}
}
