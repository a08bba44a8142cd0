package seal

import (
	"errors"
	"testing"

	"github.com/nats-io/nkeys"
)

// FuzzOpen: what a joining control node receives from the node that admits it, the
// sealed identity and the signing key sealed to its curve key, as arbitrary bytes.
// Neither opener may panic; OpenIdentity refuses with ErrOpen only, and what it
// opens is the identity sealed with this token's secret for this mesh and node,
// whole, and for no other node; FromCurveKey opens nothing but what was sealed to
// the key by the named sender. (The seeds are sealed afresh in each fuzzing
// process, with a fresh nonce: what opens is compared by content.)
func FuzzOpen(f *testing.F) {
	secret := [32]byte{7}
	id := ControlIdentity{CertPEM: []byte("cert"), KeyPEM: []byte("key"), Creds: []byte("creds")}
	good, err := Identity(secret, "demo", "cp-2", id)
	if err != nil {
		f.Fatal(err)
	}
	recipient, _ := nkeys.CreateCurveKeys()
	rpub, _ := recipient.PublicKey()
	sealedKey, sender, err := ToCurveKey([]byte("signing key"), rpub)
	if err != nil {
		f.Fatal(err)
	}
	empty, _ := Identity(secret, "demo", "cp-2", ControlIdentity{})
	f.Add(good, sealedKey)
	f.Add(good[:len(good)-1], sealedKey[:len(sealedKey)/2])
	f.Add(empty, []byte{})
	f.Add([]byte{version}, []byte("xkv1"))
	f.Fuzz(func(t *testing.T, blob, curve []byte) {
		got, err := OpenIdentity(secret, "demo", "cp-2", blob)
		switch {
		case err != nil && !errors.Is(err, ErrOpen):
			t.Fatalf("OpenIdentity: error of no known kind: %v", err)
		case err == nil && (string(got.CertPEM) != "cert" || string(got.KeyPEM) != "key" || string(got.Creds) != "creds"):
			t.Fatalf("OpenIdentity: %+v", got)
		}
		// The same blob for another node of the mesh never opens.
		if _, err := OpenIdentity(secret, "demo", "cp-3", blob); err == nil {
			t.Fatalf("a blob for cp-2 opened for cp-3: %q", blob)
		}
		data, err := FromCurveKey(recipient, curve, sender)
		if err == nil && string(data) != "signing key" {
			t.Fatalf("FromCurveKey opened %q as %q", curve, data)
		}
	})
}
