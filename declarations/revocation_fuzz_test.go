package declarations

import (
	"crypto/ed25519"
	"errors"
	"testing"
)

// A revocation notice is the one envelope that stops an agent for good, and a
// broker that passes the pin check may put any bytes on a node's declaration
// subject. These targets hold VerifyRevocation to what the other verifiers are held
// to: a refusal with a known code, and no acceptance of anything but a notice the
// trusted key signed for exactly this mesh, node and enrolment.

// revocationSeeds returns signed notices of several kinds (this enrolment's, an
// earlier enrolment's, another node's, another mesh's, another key's) and the set
// of payloads the trusted key signed.
func revocationSeeds(t testing.TB) ([][]byte, signedSet) {
	set := signedSet{}
	var seeds [][]byte
	add := func(r Revocation, keys ...ed25519.PrivateKey) {
		seeds = append(seeds, set.sign(t, PayloadTypeRevocation, []byte(encode(t, r)), keys...))
	}
	this := Revocation{Mesh: "demo", Node: "web-1", NodeKey: testNodeKey, RevokedAt: t0}
	add(this, fuzzTrusted)
	add(this, fuzzTrusted, fuzzOther)
	add(this, fuzzOther)
	earlier := this
	earlier.NodeKey = otherNodeKey
	add(earlier, fuzzTrusted)
	elsewhere := this
	elsewhere.Node = "web-2"
	add(elsewhere, fuzzTrusted)
	otherMesh := this
	otherMesh.Mesh = "evil"
	add(otherMesh, fuzzTrusted)
	seeds = append(seeds,
		set.sign(t, PayloadTypeRevocation, []byte(`{"mesh":"demo","node":"web-1","node_key":"`+testNodeKey+`"}`), fuzzTrusted),
		set.sign(t, PayloadTypeDeclaration, []byte(encode(t, this)), fuzzTrusted),
		[]byte(`{}`), []byte(`null`), []byte(``),
	)
	return seeds, set
}

func checkRevocation(t *testing.T, r Revocation) {
	t.Helper()
	if r.Mesh != "demo" || r.Node != "web-1" || r.NodeKey != testNodeKey || r.RevokedAt.IsZero() {
		t.Fatalf("accepted a notice for another audience: %+v", r)
	}
}

// FuzzVerifyRevocation: whatever the bytes, a notice is refused with a known code or
// is one the trusted key signed, for this node's enrolment.
func FuzzVerifyRevocation(f *testing.F) {
	seeds, set := revocationSeeds(f)
	for _, s := range seeds {
		f.Add(s)
	}
	trusted := []ed25519.PublicKey{pub(fuzzTrusted)}
	f.Fuzz(func(t *testing.T, raw []byte) {
		r, err := VerifyRevocation(raw, trusted, "demo", "web-1", testNodeKey)
		if err != nil {
			checkRefusal(t, err)
			return
		}
		env, err := parseEnvelope(raw)
		if err != nil || !set.has(PayloadTypeRevocation, env.Payload) {
			t.Fatalf("accepted a notice the trusted key never signed: %v", err)
		}
		checkRevocation(t, r)
		// The parse-once path agrees.
		p, err := ParseEnvelope(raw)
		if err != nil {
			t.Fatalf("VerifyRevocation accepted what ParseEnvelope refuses: %v", err)
		}
		if q, err := p.VerifyRevocation(trusted, "demo", "web-1", testNodeKey); err != nil || q != r {
			t.Fatalf("the parsed envelope verifies differently: %+v, %v", q, err)
		}
	})
}

// FuzzRevocationPayload gets past the signature: whatever payload the fuzzer makes
// is signed with the trusted key, so the payload's parser and the audience checks
// are explored. A signed payload is never called untrusted, and what is accepted
// names exactly this mesh, node and node key.
func FuzzRevocationPayload(f *testing.F) {
	f.Add([]byte(encode(f, Revocation{Mesh: "demo", Node: "web-1", NodeKey: testNodeKey, RevokedAt: t0})))
	f.Add([]byte(`{"mesh":"demo","node":"web-1","node_key":"` + testNodeKey + `","revoked_at":"2025-03-01T12:00:00Z"}`))
	f.Add([]byte(`{"mesh":"demo","node":"web-1","node_key":"` + testNodeKey + `","revoked_at":"2025-03-01T12:00:00Z","node":"web-2"}`))
	f.Add([]byte(`{"mesh":"demo","node":"web-1","node_key":"` + otherNodeKey + `","revoked_at":"2025-03-01T12:00:00Z"}`))
	f.Add([]byte(`{"mesh":"demo","node":"WEB-1","node_key":"` + testNodeKey + `","revoked_at":"2025-03-01T12:00:00+02:00"}`))
	trusted := []ed25519.PublicKey{pub(fuzzTrusted)}
	f.Fuzz(func(t *testing.T, payload []byte) {
		raw, err := SignEnvelope(PayloadTypeRevocation, payload, fuzzTrusted)
		if err != nil {
			return // empty or too large to sign
		}
		r, err := VerifyRevocation(raw, trusted, "demo", "web-1", testNodeKey)
		if err != nil {
			checkRefusal(t, err)
			if errors.Is(err, ErrUntrusted) || errors.Is(err, ErrTooLarge) {
				t.Fatalf("a payload signed by the trusted key was refused as %q: %v", Code(err), err)
			}
			return
		}
		checkRevocation(t, r)
	})
}
