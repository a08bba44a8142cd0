package declarations

import (
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"
	"time"
)

func mustKeyring(t testing.TB, k Keyring, keys ...ed25519.PrivateKey) []byte {
	t.Helper()
	raw, err := SignKeyring(k, keys...)
	if err != nil {
		t.Fatalf("SignKeyring: %v", err)
	}
	return raw
}

// TestKeyringRollover walks a host through a whole signing-key rotation:
// token key K1 (epoch 0) → epoch 1 {K1} → epoch 2 {K1, K2} signed by both →
// epoch 3 {K2} signed by K2 alone, checking at each step what the host then
// accepts.
func TestKeyringRollover(t *testing.T) {
	k1, k2 := testKey(1), testKey(2)
	const mesh = "demo"

	current := Keyring{Epoch: 0, Keys: []string{hexKey(k1)}} // from the token
	e1 := Keyring{Mesh: mesh, Epoch: 1, Keys: []string{hexKey(k1)}, IssuedAt: t0}
	e2 := Keyring{Mesh: mesh, Epoch: 2, Keys: []string{hexKey(k1), hexKey(k2)}, IssuedAt: t0.Add(time.Hour)}
	e3 := Keyring{Mesh: mesh, Epoch: 3, Keys: []string{hexKey(k2)}, IssuedAt: t0.Add(2 * time.Hour)}

	steps := []struct {
		name string
		raw  []byte
		want Keyring
	}{
		{"epoch 1, the mesh's first keyring", mustKeyring(t, e1, k1), e1},
		{"epoch 2 adds K2, signed by both", mustKeyring(t, e2, k1, k2), e2},
		{"epoch 3 retires K1, signed by K2", mustKeyring(t, e3, k2), e3},
	}
	for _, s := range steps {
		next, err := VerifyKeyring(s.raw, current, mesh)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if next.Epoch != s.want.Epoch || strings.Join(next.Keys, ",") != strings.Join(s.want.Keys, ",") || next.Mesh != mesh {
			t.Fatalf("%s: got %+v, want %+v", s.name, next, s.want)
		}
		current = next
	}

	// After epoch 3, K1 is no longer trusted: its declarations are refused
	// and K2's accepted.
	trusted, err := current.PublicKeys()
	if err != nil {
		t.Fatal(err)
	}
	_, err = VerifyDeclaration(mustSign(t, sampleDecl(), k1), trusted, sampleExpect())
	wantCode(t, err, "untrusted")
	if _, err := VerifyDeclaration(mustSign(t, sampleDecl(), k2), trusted, sampleExpect()); err != nil {
		t.Fatalf("declaration by K2 after rollover: %v", err)
	}
	// Replaying epoch 2 (which still lists K1) is refused as a rollback.
	_, err = VerifyKeyring(steps[1].raw, current, mesh)
	wantCode(t, err, "rolled_back")
}

func TestVerifyKeyringRefuses(t *testing.T) {
	k1, k2, k3 := testKey(1), testKey(2), testKey(3)
	const mesh = "demo"
	e1 := Keyring{Mesh: mesh, Epoch: 1, Keys: []string{hexKey(k1)}, IssuedAt: t0}
	e2 := Keyring{Mesh: mesh, Epoch: 2, Keys: []string{hexKey(k1), hexKey(k2)}, IssuedAt: t0}
	with := func(k Keyring, change func(*Keyring)) Keyring {
		k.Keys = append([]string(nil), k.Keys...)
		change(&k)
		return k
	}
	signRaw := func(payload string, keys ...ed25519.PrivateKey) []byte {
		return must(SignEnvelope(PayloadTypeKeyring, []byte(payload), keys...))
	}
	good := encode(t, e2)

	tests := []struct {
		name    string
		raw     []byte
		current Keyring
		code    string
		mention string
	}{
		{"signed only by the new key", mustKeyring(t, e2, k2), e1, "untrusted", "not signed by the mesh"},
		{"signed by an unrelated key", mustKeyring(t, e2, k3), e1, "untrusted", ""},
		{"new key did not sign", mustKeyring(t, e2, k1), e1, "unproven_key", KeyID(pub(k2))},
		{"one of two new keys did not sign", mustKeyring(t, with(e2, func(k *Keyring) { k.Keys = append(k.Keys, hexKey(k3)) }), k1, k2), e1, "unproven_key", KeyID(pub(k3))},
		{"lower epoch", mustKeyring(t, e1, k1), e2, "rolled_back", "keyring epoch 1 is older than 2"},
		{"same epoch, other keys", mustKeyring(t, with(e2, func(k *Keyring) { k.Keys = []string{hexKey(k1)} }), k1), e2, "replayed", "epoch 2"},
		{"other mesh", mustKeyring(t, with(e2, func(k *Keyring) { k.Mesh = "evil" }), k1, k2), e1, "wrong_mesh", `mesh "evil"`},
		{"declaration type", mustSign(t, sampleDecl(), k1), e1, "malformed", "payload type"},
		{"too large", []byte(strings.Repeat(" ", MaxEnvelopeSize+1)), e1, "too_large", ""},
		{"truncated", mustKeyring(t, e2, k1, k2)[:40], e1, "malformed", "truncated"},
		{"no keys", signRaw(replaceOnce(t, good, `"keys":[`+quoteJoin(hexKey(k1), hexKey(k2))+`]`, `"keys":[]`), k1), e1, "malformed", "no key"},
		{"duplicate key", signRaw(replaceOnce(t, good, hexKey(k2), hexKey(k1)), k1), e1, "malformed", "listed twice"},
		{"upper-case hex", signRaw(replaceOnce(t, good, hexKey(k2), strings.ToUpper(hexKey(k2))), k1, k2), e1, "malformed", "lowercase hex"},
		{"short key", signRaw(replaceOnce(t, good, hexKey(k2), hexKey(k2)[:62]), k1), e1, "malformed", "lowercase hex"},
		{"nine keys", signRaw(replaceOnce(t, good, `"keys":[`, `"keys":[`+strings.Repeat(`"`+hexKey(k3)+`",`, 7)), k1), e1, "malformed", "at most 8"},
		{"unknown field", signRaw(replaceOnce(t, good, `{"mesh"`, `{"force":true,"mesh"`), k1, k2), e1, "malformed", `unknown field "force"`},
		{"duplicate epoch", signRaw(replaceOnce(t, good, `{"mesh"`, `{"epoch":9,"mesh"`), k1, k2), e1, "malformed", `"epoch" appears twice`},
		{"no issued_at", signRaw(replaceOnce(t, good, `"issued_at":"2025-03-01T12:00:00Z"`, `"issued_at":"0001-01-01T00:00:00Z"`), k1, k2), e1, "malformed", "issued_at"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := VerifyKeyring(tc.raw, tc.current, mesh)
			wantCode(t, err, tc.code)
			if tc.mention != "" {
				wantErrContains(t, err, tc.mention)
			}
			if got.Epoch != 0 || got.Keys != nil {
				t.Errorf("refused keyring still returned %+v", got)
			}
			if tc.code == "malformed" && strings.Contains(tc.name, "key") {
				var me *MalformedError
				if !errors.As(err, &me) || !me.Signed {
					t.Errorf("error %v is not a signed *MalformedError", err)
				}
			}
		})
	}
}

func quoteJoin(keys ...string) string {
	return `"` + strings.Join(keys, `","`) + `"`
}

func TestVerifyKeyringSameEpoch(t *testing.T) {
	k1, k2 := testKey(1), testKey(2)
	cur := Keyring{Mesh: "demo", Epoch: 2, Keys: []string{hexKey(k1), hexKey(k2)}, IssuedAt: t0}
	// Same keys in another order, re-issued: accepted, unchanged.
	again := Keyring{Mesh: "demo", Epoch: 2, Keys: []string{hexKey(k2), hexKey(k1)}, IssuedAt: t0.Add(time.Hour)}
	got, err := VerifyKeyring(mustKeyring(t, again, k2), cur, "demo")
	if err != nil {
		t.Fatal(err)
	}
	if got.Epoch != 2 {
		t.Errorf("epoch = %d", got.Epoch)
	}
}

func TestVerifyKeyringCallerMistakes(t *testing.T) {
	k1 := testKey(1)
	raw := mustKeyring(t, Keyring{Mesh: "demo", Epoch: 1, Keys: []string{hexKey(k1)}, IssuedAt: t0}, k1)
	for name, tc := range map[string]struct {
		current Keyring
		mesh    string
	}{
		"no mesh":                {Keyring{Keys: []string{hexKey(k1)}}, ""},
		"current for other mesh": {Keyring{Mesh: "other", Keys: []string{hexKey(k1)}}, "demo"},
		"current without keys":   {Keyring{}, "demo"},
		"current with a bad key": {Keyring{Keys: []string{"zz"}}, "demo"},
	} {
		_, err := VerifyKeyring(raw, tc.current, tc.mesh)
		if Code(err) != "error" {
			t.Errorf("%s: Code = %q (%v), want \"error\"", name, Code(err), err)
		}
	}
}

func TestSignKeyringRefuses(t *testing.T) {
	k1 := testKey(1)
	for name, k := range map[string]Keyring{
		"no mesh":      {Epoch: 1, Keys: []string{hexKey(k1)}, IssuedAt: t0},
		"no keys":      {Mesh: "demo", Epoch: 1, IssuedAt: t0},
		"bad key":      {Mesh: "demo", Epoch: 1, Keys: []string{"00"}, IssuedAt: t0},
		"no issued_at": {Mesh: "demo", Epoch: 1, Keys: []string{hexKey(k1)}},
	} {
		if _, err := SignKeyring(k, k1); err == nil {
			t.Errorf("%s: signed", name)
		}
	}
}

func TestKeyringPublicKeys(t *testing.T) {
	k1, k2 := testKey(1), testKey(2)
	keys, err := Keyring{Keys: []string{hexKey(k1), hexKey(k2)}}.PublicKeys()
	if err != nil || len(keys) != 2 || !keys[0].Equal(pub(k1)) || !keys[1].Equal(pub(k2)) {
		t.Fatalf("PublicKeys = %v, %v", keys, err)
	}
	if _, err := (Keyring{Keys: []string{hexKey(k1), hexKey(k1)}}).PublicKeys(); err == nil {
		t.Error("duplicate keys accepted")
	}
}

func TestRevocation(t *testing.T) {
	k, other := testKey(1), testKey(2)
	trusted := []ed25519.PublicKey{pub(k)}
	r := Revocation{Mesh: "demo", Node: "web-1", NodeKey: testNodeKey, RevokedAt: t0}
	raw, err := SignRevocation(r, k)
	if err != nil {
		t.Fatal(err)
	}
	got, err := VerifyRevocation(raw, trusted, "demo", "web-1", testNodeKey)
	if err != nil || got.Mesh != "demo" || got.Node != "web-1" || !got.RevokedAt.Equal(t0) {
		t.Fatalf("VerifyRevocation = %+v, %v", got, err)
	}
	if typ, _ := PeekType(raw); typ != PayloadTypeRevocation {
		t.Errorf("PeekType = %q", typ)
	}

	tests := []struct {
		name string
		raw  []byte
		node string
		key  string
		code string
	}{
		{"for another node", raw, "web-2", testNodeKey, "wrong_audience"},
		{"for an earlier enrolment of this node", raw, "web-1", otherNodeKey, "wrong_enrolment"},
		{"without a node key", must(SignEnvelope(PayloadTypeRevocation, []byte(`{"mesh":"demo","node":"web-1","revoked_at":"2025-03-01T12:00:00Z"}`), k)), "web-1", testNodeKey, "malformed"},
		{"forged", must(SignRevocation(r, other)), "web-1", testNodeKey, "untrusted"},
		{"declaration envelope", mustSign(t, sampleDecl(), k), "web-1", testNodeKey, "malformed"},
		{"truncated", raw[:len(raw)-2], "web-1", testNodeKey, "malformed"},
		{"unknown field", must(SignEnvelope(PayloadTypeRevocation, []byte(`{"mesh":"demo","node":"web-1","revoked_at":"2025-03-01T12:00:00Z","all":true}`), k)), "web-1", testNodeKey, "malformed"},
		{"zero time", must(SignEnvelope(PayloadTypeRevocation, []byte(`{"mesh":"demo","node":"web-1","revoked_at":"0001-01-01T00:00:00Z"}`), k)), "web-1", testNodeKey, "malformed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := VerifyRevocation(tc.raw, trusted, "demo", tc.node, tc.key)
			wantCode(t, err, tc.code)
		})
	}
	_, err = VerifyRevocation(raw, trusted, "", "", "")
	wantCode(t, err, "error")
	for name, bad := range map[string]Revocation{
		"no mesh": {Node: "web-1", RevokedAt: t0},
		"no node": {Mesh: "demo", RevokedAt: t0},
		"no time": {Mesh: "demo", Node: "web-1", NodeKey: testNodeKey},
		"no key":  {Mesh: "demo", Node: "web-1", RevokedAt: t0},
	} {
		if _, err := SignRevocation(bad, k); err == nil {
			t.Errorf("%s: signed", name)
		}
	}
}
