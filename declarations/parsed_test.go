package declarations

import (
	"crypto/ed25519"
	"reflect"
	"testing"
)

// A Parsed envelope's methods are the package's verifiers without the second
// parse: for any bytes, ParseEnvelope refuses what every verifier refuses in its
// first steps, and each method gives what its function gives.

func sameOutcome(t *testing.T, what string, got, want any, gotErr, wantErr error) {
	t.Helper()
	if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
		t.Fatalf("%s: method says %v, function says %v", what, gotErr, wantErr)
	}
	if Code(gotErr) != Code(wantErr) {
		t.Fatalf("%s: codes %q and %q", what, Code(gotErr), Code(wantErr))
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: method gives %+v, function %+v", what, got, want)
	}
}

func checkParsedMatches(t *testing.T, raw []byte) {
	t.Helper()
	trusted := []ed25519.PublicKey{pub(fuzzTrusted)}
	exp := fuzzExpect()
	current := Keyring{Mesh: "demo", Epoch: 1, Keys: []string{hexKey(fuzzTrusted)}, IssuedAt: t0}

	p, err := ParseEnvelope(raw)
	typ, peekErr := PeekType(raw)
	if (err == nil) != (peekErr == nil) || err != nil && err.Error() != peekErr.Error() {
		t.Fatalf("ParseEnvelope says %v, PeekType %v", err, peekErr)
	}
	if err != nil {
		checkRefusal(t, err)
		// Every verifier refuses these bytes the same way.
		_, _, openErr := OpenEnvelope(raw, PayloadTypeDeclaration, trusted)
		_, declErr := VerifyDeclaration(raw, trusted, exp)
		for _, e := range []error{openErr, declErr} {
			if e == nil || e.Error() != err.Error() {
				t.Fatalf("ParseEnvelope refuses with %v, a verifier with %v", err, e)
			}
		}
		return
	}
	if p.PayloadType() != typ {
		t.Fatalf("PayloadType %q, PeekType %q", p.PayloadType(), typ)
	}
	v1, e1 := p.VerifyDeclaration(trusted, exp)
	v2, e2 := VerifyDeclaration(raw, trusted, exp)
	sameOutcome(t, "VerifyDeclaration", v1, v2, e1, e2)
	k1, e1 := p.VerifyKeyring(current, "demo")
	k2, e2 := VerifyKeyring(raw, current, "demo")
	sameOutcome(t, "VerifyKeyring", k1, k2, e1, e2)
	r1, e1 := p.VerifyRevocation(trusted, "demo", "web-1", testNodeKey)
	r2, e2 := VerifyRevocation(raw, trusted, "demo", "web-1", testNodeKey)
	sameOutcome(t, "VerifyRevocation", r1, r2, e1, e2)
	m1, e1 := p.VerifyMembership(trusted, "demo", 1, []string{"10.0.0.1:7300"})
	m2, e2 := VerifyMembership(raw, trusted, "demo", 1, []string{"10.0.0.1:7300"})
	sameOutcome(t, "VerifyMembership", m1, m2, e1, e2)
	for _, typ := range []string{PayloadTypeDeclaration, PayloadTypeKeyring} {
		pl1, s1, e1 := p.Open(typ, trusted)
		pl2, s2, e2 := OpenEnvelope(raw, typ, trusted)
		sameOutcome(t, "Open", []any{pl1, s1}, []any{pl2, s2}, e1, e2)
	}
}

func parsedSeeds(t testing.TB) [][]byte {
	seeds, _ := declarationSeeds(t)
	k := fuzzTrusted
	for _, raw := range [][]byte{
		mustSignKeyring(t, Keyring{Mesh: "demo", Epoch: 2, Keys: []string{hexKey(k)}, IssuedAt: t0}, k),
		mustSignRevocation(t, Revocation{Mesh: "demo", Node: "web-1", NodeKey: testNodeKey, RevokedAt: t0}, k),
		mustSignMembership(t, Membership{Mesh: "demo", Version: 2, Brokers: []string{"10.0.0.2:7300"}, IssuedAt: t0}, k),
	} {
		seeds = append(seeds, raw)
	}
	return seeds
}

func mustSignKeyring(t testing.TB, kr Keyring, k ed25519.PrivateKey) []byte {
	raw, err := SignKeyring(kr, k)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func mustSignRevocation(t testing.TB, r Revocation, k ed25519.PrivateKey) []byte {
	raw, err := SignRevocation(r, k)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func mustSignMembership(t testing.TB, m Membership, k ed25519.PrivateKey) []byte {
	raw, err := SignMembership(m, k)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestParsedMatchesFunctions(t *testing.T) {
	for _, raw := range parsedSeeds(t) {
		checkParsedMatches(t, raw)
	}
}

// The caller's mistakes are refused by the methods as by the functions.
func TestParsedCallerMistakes(t *testing.T) {
	p, err := ParseEnvelope(mustSign(t, sampleDecl(), testKey(1)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.VerifyDeclaration([]ed25519.PublicKey{pub(testKey(1))}, Expect{}); Code(err) != "error" {
		t.Fatalf("no expectations: %v", err)
	}
	if _, err := p.VerifyDeclaration([]ed25519.PublicKey{pub(testKey(1))[:31]}, sampleExpect()); Code(err) != "error" {
		t.Fatalf("a short trusted key: %v", err)
	}
	if _, _, err := p.Open(PayloadTypeDeclaration, []ed25519.PublicKey{pub(testKey(1))[:31]}); Code(err) != "error" {
		t.Fatalf("a short trusted key: %v", err)
	}
}

func FuzzParsedEnvelope(f *testing.F) {
	for _, s := range parsedSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw []byte) { checkParsedMatches(t, raw) })
}
