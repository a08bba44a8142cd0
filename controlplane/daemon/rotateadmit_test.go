package daemon

import (
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"mesh/controlplane/api"
	"mesh/controlplane/datadir"
	"mesh/controlplane/seal"
	"mesh/controlplane/state"
)

// TestAControlNodeAdmittedDuringARotationGetsTheNewKey: a rotation seals the new
// signing key to the control nodes it looked at; a node admitted after that look and
// before the rotation's commit is not among them, and its admission handed it the
// keys this node signed with, the old one alone. After the retire it held no key of
// the keyring, and hosts refused everything it signed as leader (a review). The
// admission's sealing waits for a rotation in progress, and hands the new key too.
func TestAControlNodeAdmittedDuringARotationGetsTheNewKey(t *testing.T) {
	d := fleet(t, 0)
	curve, err := nkeys.CreateCurveKeys()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := curve.PublicKey()

	d.keyringMu.Lock() // a rotation that has looked at the control nodes
	admitted := make(chan *api.ControlAdmission, 1)
	go func() {
		adm, err := d.admitControl(api.EnrolRequest{CurveKey: pub}, []byte("identity"), &state.ControlNode{ID: "cp-2"})
		if err != nil {
			t.Error(err)
		}
		admitted <- adm
	}()
	select {
	case <-admitted:
		d.keyringMu.Unlock()
		t.Fatal("the admission sealed its keys while a rotation was in progress")
	case <-time.After(100 * time.Millisecond):
	}
	res, err := d.rotateHeld(api.RotateRequest{})
	d.keyringMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	adm := <-admitted
	if adm == nil {
		t.FailNow()
	}
	keys := handedKeys(t, curve, adm)
	handed := map[string]bool{}
	for _, k := range keys {
		handed[hex.EncodeToString(k.Public().(ed25519.PublicKey))] = true
	}
	for _, k := range res.Keys {
		if !handed[k] {
			t.Fatalf("the joiner was handed %d key(s), not %s of the keyring epoch %d %v", len(keys), k, res.Epoch, res.Keys)
		}
	}
}

// TestAnAdmissionHandsOverTheKeysOfTheCommittedKeyring: a leader that took over
// after a rotation committed syncs its signer with the new key asynchronously (the
// effects actor); an admission before that handed the old key alone, and after
// the retire the joiner held none (a review). The admission syncs first.
func TestAnAdmissionHandsOverTheKeysOfTheCommittedKeyring(t *testing.T) {
	d := fleet(t, 0)
	res, err := d.rotateKey(api.RotateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	d.signer.setKeys(d.signer.currentKeys()[:1]) // the new key not synced yet
	curve, err := nkeys.CreateCurveKeys()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := curve.PublicKey()
	adm, err := d.admitControl(api.EnrolRequest{CurveKey: pub}, []byte("identity"), &state.ControlNode{ID: "cp-2"})
	if err != nil {
		t.Fatal(err)
	}
	keys := handedKeys(t, curve, adm)
	if len(keys) != len(res.Keys) {
		t.Fatalf("the joiner was handed %d key(s); the keyring epoch %d lists %d", len(keys), res.Epoch, len(res.Keys))
	}
}

// TestAnAdmissionIsRefusedWhileThisNodeLacksAKeyOfTheKeyring: a keyring that lists a
// key this node was sealed no copy of (a rotation that missed it): an admission here
// would hand its joiner fewer keys than the keyring lists, so none is made, and the
// refusal is one to wait out (unavailable), said before the token is used.
func TestAnAdmissionIsRefusedWhileThisNodeLacksAKeyOfTheKeyring(t *testing.T) {
	d := fleet(t, 0)
	if _, err := d.keysToHandOver(); err != nil {
		t.Fatalf("every key held: %v", err)
	}
	var cur state.Keyring
	d.fsm.Read(func(s *state.State) { cur = s.Keyring })
	other, _, _ := ed25519.GenerateKey(nil)
	next := state.Keyring{Epoch: cur.Epoch + 1, Keys: append(slices.Clone(cur.Keys), hex.EncodeToString(other)), Envelope: cur.Envelope}
	if res, err := d.raft.Apply(state.Command{Op: state.OpRotate, Rotate: &state.RotateCmd{Keyring: next}}, time.Minute); err != nil || res.Err != nil {
		t.Fatal(err, res.Err)
	}
	if _, err := d.keysToHandOver(); !errors.Is(err, errKeysNotHeld) {
		t.Fatalf("a keyring key not held: %v, want errKeysNotHeld", err)
	}
}

// handedKeys opens the signing keys an admission sealed to the joiner's curve key.
func handedKeys(t *testing.T, curve nkeys.KeyPair, adm *api.ControlAdmission) []ed25519.PrivateKey {
	t.Helper()
	pem, err := seal.FromCurveKey(curve, adm.SigningKey, adm.Sealer)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := datadir.ParseSigningKeys(pem)
	if err != nil {
		t.Fatal(err)
	}
	return keys
}
