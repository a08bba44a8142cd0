package declarations

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestPAE(t *testing.T) {
	// The example from the DSSE specification (protocol.md of
	// secure-systems-lab/dsse).
	got := PAE("http://example.com/HelloWorld", []byte("hello world"))
	if want := "DSSEv1 29 http://example.com/HelloWorld 11 hello world"; string(got) != want {
		t.Errorf("PAE = %q, want %q", got, want)
	}
	if got, want := string(PAE("", nil)), "DSSEv1 0  0 "; got != want {
		t.Errorf("PAE of empties = %q, want %q", got, want)
	}
	// Lengths keep type and payload apart: moving a byte across the boundary
	// changes the encoding.
	if bytes.Equal(PAE("a b", []byte("c")), PAE("a", []byte("b c"))) {
		t.Error("PAE does not separate type from payload")
	}
}

func TestKeyID(t *testing.T) {
	k := pub(testKey(1))
	h := sha256.Sum256(k)
	if got, want := KeyID(k), "ed25519:"+hex.EncodeToString(h[:8]); got != want {
		t.Errorf("KeyID = %q, want %q", got, want)
	}
	if !validKeyID(KeyID(k)) {
		t.Errorf("KeyID %q does not pass its own format check", KeyID(k))
	}
	if KeyID(k) == KeyID(pub(testKey(2))) {
		t.Error("two keys share a key id")
	}
}

func TestSignOpenRoundTrip(t *testing.T) {
	k1, k2, k3 := testKey(1), testKey(2), testKey(3)
	payload := []byte(`{"hello":"world"}`)
	raw, err := SignEnvelope("application/x-test", payload, k1, k2)
	if err != nil {
		t.Fatal(err)
	}
	env := decodeEnv(t, raw)
	if !slices.IsSortedFunc(env.Signatures, func(a, b Signature) int { return strings.Compare(a.KeyID, b.KeyID) }) {
		t.Errorf("signatures not sorted by keyid: %v", env.Signatures)
	}
	for _, tc := range []struct {
		name    string
		trusted []ed25519.PublicKey
		want    []ed25519.PublicKey
	}{
		{"both trusted", []ed25519.PublicKey{pub(k2), pub(k1)}, []ed25519.PublicKey{pub(k2), pub(k1)}},
		{"one trusted", []ed25519.PublicKey{pub(k3), pub(k1)}, []ed25519.PublicKey{pub(k1)}},
		{"trusted listed twice", []ed25519.PublicKey{pub(k1), pub(k1)}, []ed25519.PublicKey{pub(k1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, signedBy, err := OpenEnvelope(raw, "application/x-test", tc.trusted)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, payload) {
				t.Errorf("payload = %q, want %q", got, payload)
			}
			if len(signedBy) != len(tc.want) {
				t.Fatalf("signedBy has %d keys, want %d", len(signedBy), len(tc.want))
			}
			for i := range signedBy {
				if !signedBy[i].Equal(tc.want[i]) {
					t.Errorf("signedBy[%d] = %s, want %s", i, KeyID(signedBy[i]), KeyID(tc.want[i]))
				}
			}
		})
	}
	if typ, err := PeekType(raw); err != nil || typ != "application/x-test" {
		t.Errorf("PeekType = %q, %v", typ, err)
	}
}

func TestOpenEnvelopeOneBadSignatureAmongGood(t *testing.T) {
	k1, k2 := testKey(1), testKey(2)
	env := decodeEnv(t, must(SignEnvelope("application/x-test", []byte("p"), k1, k2)))
	i := slices.IndexFunc(env.Signatures, func(s Signature) bool { return s.KeyID == KeyID(pub(k2)) })
	env.Signatures[i].Sig[0] ^= 1
	_, signedBy, err := OpenEnvelope([]byte(encode(t, env)), "application/x-test", []ed25519.PublicKey{pub(k1), pub(k2)})
	if err != nil {
		t.Fatal(err)
	}
	if len(signedBy) != 1 || !signedBy[0].Equal(pub(k1)) {
		t.Errorf("signedBy = %d keys, want only k1", len(signedBy))
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

func TestSignEnvelopeRefuses(t *testing.T) {
	k := testKey(1)
	nine := make([]ed25519.PrivateKey, 9)
	for i := range nine {
		nine[i] = testKey(byte(10 + i))
	}
	for _, tc := range []struct {
		name    string
		typ     string
		payload []byte
		keys    []ed25519.PrivateKey
		code    string
		mention string
	}{
		{"no key", "t", []byte("p"), nil, "error", "no signing key"},
		{"short key", "t", []byte("p"), []ed25519.PrivateKey{k[:32]}, "error", "32 bytes"},
		{"same key twice", "t", []byte("p"), []ed25519.PrivateKey{k, k}, "error", "given twice"},
		{"nine keys", "t", []byte("p"), nine, "error", "at most 8"},
		{"empty payload", "t", nil, []ed25519.PrivateKey{k}, "error", "empty payload"},
		{"empty type", "", []byte("p"), []ed25519.PrivateKey{k}, "error", "payloadType is empty"},
		{"type with space", "a b", []byte("p"), []ed25519.PrivateKey{k}, "error", "printable ASCII"},
		{"too large", "t", bytes.Repeat([]byte("x"), MaxEnvelopeSize), []ed25519.PrivateKey{k}, "too_large", "over the limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := SignEnvelope(tc.typ, tc.payload, tc.keys...)
			wantCode(t, err, tc.code)
			wantErrContains(t, err, tc.mention)
		})
	}
}

// TestOpenEnvelopeRefuses covers each way an envelope is refused before or
// at the signature check, with the error code it must get.
func TestOpenEnvelopeRefuses(t *testing.T) {
	k, other := testKey(1), testKey(2)
	trusted := []ed25519.PublicKey{pub(k)}
	const typ = PayloadTypeDeclaration
	payload := []byte(`{"x":1}`)
	good := must(SignEnvelope(typ, payload, k))
	goodEnv := decodeEnv(t, good)
	sig := base64.StdEncoding.EncodeToString(goodEnv.Signatures[0].Sig)
	kid := goodEnv.Signatures[0].KeyID
	b64 := base64.StdEncoding.EncodeToString
	// envJSON writes an envelope by hand so tests control every byte.
	envJSON := func(typ, payloadB64, sigs string) string {
		return fmt.Sprintf(`{"payloadType":%q,"payload":%q,"signatures":%s}`, typ, payloadB64, sigs)
	}
	oneSig := fmt.Sprintf(`[{"keyid":%q,"sig":%q}]`, kid, sig)

	modified := decodeEnv(t, good)
	modified.Payload = []byte(`{"x":2}`)

	// A signature made for a keyring, moved onto a declaration with the
	// same payload bytes: PAE binds the type, so it no longer verifies.
	moved := decodeEnv(t, must(SignEnvelope(PayloadTypeKeyring, payload, k)))
	moved.PayloadType = typ

	nineSigs := make([]string, 9)
	for i := range nineSigs {
		nineSigs[i] = fmt.Sprintf(`{"keyid":"ed25519:%016x","sig":%q}`, i, sig)
	}
	// "YQ==" is "a"; "YR==" decodes to "a" too under lenient decoding
	// (non-zero padding bits), so it is a second spelling of the payload.
	nonCanonical := envJSON(typ, "YR==", oneSig)

	tests := []struct {
		name string
		raw  string
		code string
	}{
		{"modified payload byte", encode(t, modified), "untrusted"},
		{"signature moved to another payload type", encode(t, moved), "untrusted"},
		{"valid signature by another key", string(must(SignEnvelope(typ, payload, other))), "untrusted"},
		{"signature bytes flipped", strings.Replace(string(good), sig, b64(flip(goodEnv.Signatures[0].Sig)), 1), "untrusted"},
		{"2 MiB", strings.Repeat("x", 2<<20), "too_large"},
		{"valid envelope padded past the cap", string(good) + strings.Repeat(" ", MaxEnvelopeSize), "too_large"},
		{"empty input", "", "malformed"},
		{"truncated", string(good[:len(good)/2]), "malformed"},
		{"truncated by one byte", string(good[:len(good)-1]), "malformed"},
		{"not JSON", "hello", "malformed"},
		{"JSON array", "[]", "malformed"},
		{"JSON null", "null", "malformed"},
		{"trailing data", string(good) + "{}", "malformed"},
		{"trailing garbage", string(good) + "x", "malformed"},
		{"unknown field", strings.Replace(string(good), `{"payloadType"`, `{"extra":1,"payloadType"`, 1), "malformed"},
		{"duplicate key", strings.Replace(string(good), `{"payloadType"`, fmt.Sprintf(`{"payload":%q,"payloadType"`, b64([]byte(`{"x":3}`))), 1), "malformed"},
		{"key in other case", strings.Replace(string(good), `"payloadType"`, `"PayloadType"`, 1), "malformed"},
		{"case-folded duplicate", strings.Replace(string(good), `{"payloadType"`, `{"PAYLOAD":"eA==","payloadType"`, 1), "malformed"},
		{"unknown field in signature", envJSON(typ, b64(payload), fmt.Sprintf(`[{"keyid":%q,"sig":%q,"x":1}]`, kid, sig)), "malformed"},
		{"duplicate key in signature", envJSON(typ, b64(payload), fmt.Sprintf(`[{"keyid":%q,"sig":%q,"sig":%q}]`, kid, sig, sig)), "malformed"},
		{"missing payloadType", fmt.Sprintf(`{"payload":%q,"signatures":%s}`, b64(payload), oneSig), "malformed"},
		{"missing payload", fmt.Sprintf(`{"payloadType":%q,"signatures":%s}`, typ, oneSig), "malformed"},
		{"missing signatures", fmt.Sprintf(`{"payloadType":%q,"payload":%q}`, typ, b64(payload)), "malformed"},
		{"null signatures", fmt.Sprintf(`{"payloadType":%q,"payload":%q,"signatures":null}`, typ, b64(payload)), "malformed"},
		{"null payload", fmt.Sprintf(`{"payloadType":%q,"payload":null,"signatures":%s}`, typ, oneSig), "malformed"},
		{"payload not a string", fmt.Sprintf(`{"payloadType":%q,"payload":7,"signatures":%s}`, typ, oneSig), "malformed"},
		{"non-canonical base64 padding bits", nonCanonical, "malformed"},
		{"base64 with a line break", envJSON(typ, b64(payload)[:4]+`\n`+b64(payload)[4:], oneSig), "malformed"},
		{"base64 unpadded", envJSON(typ, strings.TrimRight(b64(payload), "="), oneSig), "malformed"},
		{"base64 url alphabet", envJSON(typ, "-_-_", oneSig), "malformed"},
		{"empty payload", envJSON(typ, "", oneSig), "malformed"},
		{"zero signatures", envJSON(typ, b64(payload), `[]`), "malformed"},
		{"nine signatures", envJSON(typ, b64(payload), "["+strings.Join(nineSigs, ",")+"]"), "malformed"},
		{"signature 63 bytes", envJSON(typ, b64(payload), fmt.Sprintf(`[{"keyid":%q,"sig":%q}]`, kid, b64(make([]byte, 63)))), "malformed"},
		{"signature 65 bytes", envJSON(typ, b64(payload), fmt.Sprintf(`[{"keyid":%q,"sig":%q}]`, kid, b64(make([]byte, 65)))), "malformed"},
		{"keyid not hex", envJSON(typ, b64(payload), fmt.Sprintf(`[{"keyid":"ed25519:zzzzzzzzzzzzzzzz","sig":%q}]`, sig)), "malformed"},
		{"keyid upper case", envJSON(typ, b64(payload), fmt.Sprintf(`[{"keyid":%q,"sig":%q}]`, strings.ToUpper(kid), sig)), "malformed"},
		{"keyid empty", envJSON(typ, b64(payload), fmt.Sprintf(`[{"keyid":"","sig":%q}]`, sig)), "malformed"},
		{"same keyid twice", envJSON(typ, b64(payload), fmt.Sprintf(`[{"keyid":%q,"sig":%q},{"keyid":%q,"sig":%q}]`, kid, sig, kid, sig)), "malformed"},
		{"wrong payload type", string(must(SignEnvelope(PayloadTypeKeyring, payload, k))), "malformed"},
		{"payload type with control character", envJSON("a\tb", b64(payload), oneSig), "malformed"},
		{"invalid UTF-8", strings.Replace(string(good), typ, typ+"\xff", 1), "malformed"},
		{"deeply nested", strings.Repeat("[", 10000), "malformed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, signedBy, err := OpenEnvelope([]byte(tc.raw), typ, trusted)
			wantCode(t, err, tc.code)
			if got != nil || signedBy != nil {
				t.Errorf("refused envelope still returned payload %q / %d signers", got, len(signedBy))
			}
			if tc.code == "malformed" || tc.code == "too_large" {
				var me *MalformedError
				if tc.code == "malformed" && !errors.As(err, &me) {
					t.Errorf("error %T is not a *MalformedError", err)
				}
				if !errors.Is(err, ErrMalformed) {
					t.Errorf("error %v is not ErrMalformed", err)
				}
			}
		})
	}
	// The good envelope passes, so the refusals above are not an artefact
	// of the setup.
	if _, _, err := OpenEnvelope(good, typ, trusted); err != nil {
		t.Fatalf("good envelope refused: %v", err)
	}
	// The lenient spelling really is a second encoding of the same payload:
	// encoding/json alone would have accepted it.
	var lenient Envelope
	if err := json.Unmarshal([]byte(nonCanonical), &lenient); err != nil || string(lenient.Payload) != "a" {
		t.Fatalf("test premise: lenient decoding gave %q, %v", lenient.Payload, err)
	}
}

func flip(b []byte) []byte {
	c := bytes.Clone(b)
	c[len(c)-1] ^= 0x80
	return c
}

// An envelope that is not from this mesh must never read like a malformed
// one: a person has to tell "forged or foreign" from "garbled".
func TestUntrustedDoesNotReadLikeMalformed(t *testing.T) {
	k, other := testKey(1), testKey(2)
	raw := mustSign(t, sampleDecl(), other)
	_, _, errU := OpenEnvelope(raw, PayloadTypeDeclaration, []ed25519.PublicKey{pub(k)})
	_, _, errM := OpenEnvelope(raw[:len(raw)-3], PayloadTypeDeclaration, []ed25519.PublicKey{pub(k)})
	if !errors.Is(errU, ErrUntrusted) || errors.Is(errU, ErrMalformed) {
		t.Fatalf("foreign envelope: %v", errU)
	}
	if !errors.Is(errM, ErrMalformed) || errors.Is(errM, ErrUntrusted) {
		t.Fatalf("truncated envelope: %v", errM)
	}
	u, m := errU.Error(), errM.Error()
	wantErrContains(t, errU, "not signed by the mesh this node joined")
	wantErrContains(t, errU, KeyID(pub(other)))
	wantErrContains(t, errU, KeyID(pub(k)))
	if strings.Contains(u, "malformed") {
		t.Errorf("untrusted message reads like malformed: %s", u)
	}
	if strings.Contains(m, "not signed") || strings.Contains(m, "trusted") {
		t.Errorf("malformed message reads like untrusted: %s", m)
	}
}

func TestOpenEnvelopeCallerMistakes(t *testing.T) {
	raw := must(SignEnvelope("t", []byte("p"), testKey(1)))
	_, _, err := OpenEnvelope(raw, "t", []ed25519.PublicKey{pub(testKey(1))[:31]})
	wantCode(t, err, "error")
	_, _, err = OpenEnvelope(raw, "t", nil)
	wantCode(t, err, "untrusted")
	wantErrContains(t, err, "trusts no key")
}

func TestPeekType(t *testing.T) {
	raw := must(SignEnvelope(PayloadTypeRevocation, []byte("p"), testKey(9)))
	if typ, err := PeekType(raw); err != nil || typ != PayloadTypeRevocation {
		t.Errorf("PeekType = %q, %v", typ, err)
	}
	_, err := PeekType(raw[:10])
	wantCode(t, err, "malformed")
	_, err = PeekType(bytes.Repeat([]byte(" "), MaxEnvelopeSize+1))
	wantCode(t, err, "too_large")
}

func TestCode(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{nil, ""},
		{ErrTooLarge, "too_large"},
		{fmt.Errorf("wrapped: %w", ErrTooLarge), "too_large"},
		{ErrMalformed, "malformed"},
		{&MalformedError{What: "envelope", Reason: "x"}, "malformed"},
		{ErrUntrusted, "untrusted"},
		{ErrUnprovenKey, "unproven_key"},
		{&AudienceError{}, "wrong_audience"},
		{&AudienceError{WantMesh: "demo", GotMesh: "evil"}, "wrong_mesh"},
		{&AudienceError{WantMesh: "demo", WantNode: "a", WantKey: "k1", GotMesh: "demo", GotNode: "a", GotKey: "k2"}, "wrong_enrolment"},
		{&OldKeyringError{Got: 1, Current: 2}, "old_keyring"},
		{&VersionError{}, "rolled_back"},
		{ErrReplayed, "replayed"},
		{&ExpiredError{}, "expired"},
		{ErrNotYetValid, "not_yet_valid"},
		{&BodyError{}, "invalid_body"},
		{errors.New("other"), "error"},
	}
	for _, tc := range tests {
		if got := Code(tc.err); got != tc.want {
			t.Errorf("Code(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
	if !errors.Is(ErrTooLarge, ErrMalformed) {
		t.Error("ErrTooLarge is not ErrMalformed")
	}
	if errors.Is(ErrMalformed, ErrTooLarge) {
		t.Error("ErrMalformed is ErrTooLarge")
	}
}
