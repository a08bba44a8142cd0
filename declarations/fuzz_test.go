package declarations

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"
)

// The fuzz targets below feed arbitrary bytes to the verifiers and check two
// things: nothing panics, and nothing is accepted unless its payload was
// really signed by the trusted key. The trusted key's private half is only
// used by the harness to make the seeds; the fuzzer can mutate the bytes of
// a seed but cannot sign, so anything it gets accepted must carry exactly a
// payload the harness signed (envelope bytes around it may differ, e.g. in
// whitespace or signature order).

var knownCodes = map[string]bool{
	"too_large": true, "malformed": true, "untrusted": true, "unproven_key": true,
	"wrong_audience": true, "wrong_mesh": true, "wrong_enrolment": true, "old_keyring": true, "rolled_back": true, "replayed": true, "expired": true,
	"not_yet_valid": true, "invalid_body": true,
}

// checkRefusal asserts that a refusal of hostile input is classified and its
// message bounded, whatever the input.
func checkRefusal(t *testing.T, err error) {
	t.Helper()
	if !knownCodes[Code(err)] {
		t.Fatalf("refusal without a known code: %q: %v", Code(err), err)
	}
	if n := len(err.Error()); n > 2000 {
		t.Fatalf("refusal message is %d bytes: hostile input made it grow", n)
	}
}

// signedSet records the payloads the harness signed with the trusted key.
type signedSet map[string]bool

func (s signedSet) sign(t testing.TB, typ string, payload []byte, keys ...ed25519.PrivateKey) []byte {
	raw, err := SignEnvelope(typ, payload, keys...)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if k.Equal(fuzzTrusted) {
			s[typ+"\x00"+string(payload)] = true
		}
	}
	return raw
}

func (s signedSet) has(typ string, payload []byte) bool { return s[typ+"\x00"+string(payload)] }

var (
	fuzzTrusted = testKey(1)
	fuzzOther   = testKey(2)
)

func fuzzExpect() Expect {
	exp := sampleExpect()
	exp.HaveApplied, exp.AppliedVersion, exp.AppliedBodyDigest = true, 3, sampleBody().Digest()
	return exp
}

// declarationSeeds returns signed declarations of several kinds (accepted,
// rolled back, expired, for another node, by another key) and the set of
// payloads signed by the trusted key.
func declarationSeeds(t testing.TB) ([][]byte, signedSet) {
	set := signedSet{}
	var seeds [][]byte
	add := func(d Declaration, keys ...ed25519.PrivateKey) {
		if err := d.Body.Validate(); err != nil {
			t.Fatal(err)
		}
		d.IssuedAt, d.ExpiresAt = d.IssuedAt.UTC(), d.ExpiresAt.UTC()
		payload, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, set.sign(t, PayloadTypeDeclaration, payload, keys...))
	}
	d := sampleDecl()
	add(d, fuzzTrusted)
	add(d, fuzzTrusted, fuzzOther)
	add(d, fuzzOther)
	newer := sampleDecl()
	newer.Version = 4
	add(newer, fuzzTrusted)
	older := sampleDecl()
	older.Version = 2
	add(older, fuzzTrusted)
	elsewhere := sampleDecl()
	elsewhere.Node = "db-1"
	add(elsewhere, fuzzTrusted)
	expired := sampleDecl()
	expired.ExpiresAt = t0.Add(time.Minute)
	add(expired, fuzzTrusted)
	empty := sampleDecl()
	empty.Version, empty.Body = 5, Body{}
	add(empty, fuzzTrusted)
	// Declarations signed in a batch (decision 0034): web-1's among others, by the
	// trusted key, and a batch by the other key.
	batch := func(keys ...ed25519.PrivateKey) {
		var payloads [][]byte
		for _, node := range []string{"db-1", "web-1", "web-2", "web-3", "web-4"} {
			d := sampleDecl()
			d.Node = node
			d.IssuedAt, d.ExpiresAt = d.IssuedAt.UTC(), d.ExpiresAt.UTC()
			p, err := json.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			payloads = append(payloads, p)
		}
		s, err := NewSigner(keys...)
		if err != nil {
			t.Fatal(err)
		}
		b, err := s.SignBatch(PayloadTypeDeclaration, payloads)
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range payloads {
			env, err := b.Envelope(i)
			if err != nil {
				t.Fatal(err)
			}
			if slices.ContainsFunc(keys, func(k ed25519.PrivateKey) bool { return k.Equal(fuzzTrusted) }) {
				set[PayloadTypeDeclaration+"\x00"+string(p)] = true
			}
			seeds = append(seeds, env)
		}
	}
	batch(fuzzTrusted)
	batch(fuzzOther)
	batch(fuzzTrusted, fuzzOther)
	seeds = append(seeds,
		set.sign(t, PayloadTypeDeclaration, []byte(`{"mesh":"demo"}`), fuzzTrusted),
		set.sign(t, PayloadTypeKeyring, []byte(encode(t, sampleDecl())), fuzzTrusted),
		[]byte(`{"payloadType":"x","payload":"eA==","signatures":[{"keyid":"ed25519:0000000000000000","sig":""}]}`),
		[]byte(`{}`), []byte(`[]`), []byte(`null`), []byte(``),
	)
	return seeds, set
}

func FuzzOpenEnvelope(f *testing.F) {
	seeds, set := declarationSeeds(f)
	for _, s := range seeds {
		f.Add(s)
	}
	trusted := []ed25519.PublicKey{pub(fuzzTrusted)}
	f.Fuzz(func(t *testing.T, raw []byte) {
		typ, peekErr := PeekType(raw)
		payload, signedBy, err := OpenEnvelope(raw, PayloadTypeDeclaration, trusted)
		if err != nil {
			checkRefusal(t, err)
			if payload != nil || signedBy != nil {
				t.Fatal("refused, yet returned a payload or signers")
			}
			return
		}
		if !set.has(PayloadTypeDeclaration, payload) {
			t.Fatalf("accepted a payload the trusted key never signed: %q", payload)
		}
		if len(signedBy) != 1 || !signedBy[0].Equal(trusted[0]) {
			t.Fatalf("signedBy = %d keys, want the trusted key", len(signedBy))
		}
		if peekErr != nil || typ != PayloadTypeDeclaration {
			t.Fatalf("OpenEnvelope accepted what PeekType refused: %q, %v", typ, peekErr)
		}
	})
}

func FuzzVerifyDeclaration(f *testing.F) {
	seeds, set := declarationSeeds(f)
	for _, s := range seeds {
		f.Add(s)
	}
	trusted := []ed25519.PublicKey{pub(fuzzTrusted)}
	exp := fuzzExpect()
	f.Fuzz(func(t *testing.T, raw []byte) {
		v, err := VerifyDeclaration(raw, trusted, exp)
		if err != nil {
			checkRefusal(t, err)
			return
		}
		payload, _, err := OpenEnvelope(raw, PayloadTypeDeclaration, trusted)
		if err != nil {
			t.Fatalf("VerifyDeclaration accepted what OpenEnvelope refuses: %v", err)
		}
		if !set.has(PayloadTypeDeclaration, payload) {
			t.Fatalf("accepted a declaration the trusted key never signed: %q", payload)
		}
		checkAccepted(t, v, exp)
	})
}

// FuzzDeclarationPayload gets past the signature: the harness signs whatever
// payload the fuzzer makes with the trusted key, so the payload parser and
// the checks after the signature are explored. It verifies that nothing
// panics, that a signed payload is never called untrusted, and that whatever
// is accepted is internally consistent.
func FuzzDeclarationPayload(f *testing.F) {
	for _, d := range []Declaration{sampleDecl(), {Mesh: "demo", Node: "web-1", IssuedAt: t0, ExpiresAt: t0.Add(time.Hour)}} {
		f.Add([]byte(encode(f, d)))
	}
	f.Add([]byte(`{"mesh":"demo","node":"web-1","version":4,"keyring_epoch":0,"issued_at":"2025-03-01T12:00:00Z","expires_at":"2025-03-02T12:00:00Z","body":{"files":[{"path":"a/b","content_base64":"AAE=","mode":"0600","owner":"0","group":"wheel"}]}}`))
	trusted := []ed25519.PublicKey{pub(fuzzTrusted)}
	exp := fuzzExpect()
	f.Fuzz(func(t *testing.T, payload []byte) {
		raw, err := SignEnvelope(PayloadTypeDeclaration, payload, fuzzTrusted)
		if err != nil {
			return // empty or too large to sign
		}
		v, err := VerifyDeclaration(raw, trusted, exp)
		if err != nil {
			checkRefusal(t, err)
			if errors.Is(err, ErrUntrusted) || errors.Is(err, ErrTooLarge) {
				t.Fatalf("a payload signed by the trusted key was refused as %q: %v", Code(err), err)
			}
			var me *MalformedError
			if errors.As(err, &me) && !me.Signed {
				t.Fatalf("a well-formed envelope was called malformed: %v", err)
			}
			return
		}
		checkAccepted(t, v, exp)
		// What was accepted can be signed again and verifies the same.
		again, err := SignDeclaration(v.Declaration, fuzzTrusted)
		if err != nil {
			t.Fatalf("accepted declaration cannot be signed again: %v", err)
		}
		w, err := VerifyDeclaration(again, trusted, exp)
		if err != nil || w.BodyDigest != v.BodyDigest || w.Version != v.Version {
			t.Fatalf("re-signed declaration verifies differently: %v", err)
		}
	})
}

func checkAccepted(t *testing.T, v Verified, exp Expect) {
	t.Helper()
	if v.Mesh != exp.Mesh || v.Node != exp.Node {
		t.Fatalf("accepted a declaration for %s/%s", v.Mesh, v.Node)
	}
	if v.Version < exp.AppliedVersion {
		t.Fatalf("accepted version %d below applied %d", v.Version, exp.AppliedVersion)
	}
	if v.Version == exp.AppliedVersion && (!v.SameAsApplied || v.BodyDigest != exp.AppliedBodyDigest) {
		t.Fatal("accepted a different body under the applied version")
	}
	early := exp.Now.Before(v.IssuedAt.Add(-DefaultFutureSkew)) && !(exp.AppliedAnyIssueTime && v.SameAsApplied)
	if early || exp.Now.After(v.ExpiresAt.Add(DefaultSkew)) {
		t.Fatalf("accepted outside its window: %s..%s", v.IssuedAt, v.ExpiresAt)
	}
	if err := v.Body.Validate(); err != nil {
		t.Fatalf("accepted an invalid body: %v", err)
	}
	if v.BodyDigest != v.Body.Digest() {
		t.Fatal("BodyDigest does not match the body")
	}
	for _, f := range v.Body.Files {
		if _, err := f.Data(); err != nil {
			t.Fatalf("accepted file without usable data: %v", err)
		}
		if _, err := f.FileMode(); err != nil {
			t.Fatalf("accepted file without usable mode: %v", err)
		}
	}
}

func FuzzParseBody(f *testing.F) {
	f.Add([]byte(`{"files":[{"path":"etc/app.conf","content":"text","mode":"0640"}]}`))
	f.Add([]byte(`{"files":[{"path":"bin/x","content_base64":"AAE=","owner":"root","group":"0"},{"path":"bin/y","content":""}]}`))
	f.Add([]byte(`{"files":[]}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"files":[{"path":"a","content":"x"},{"path":"a/b","content":"y"}]}`))
	f.Add([]byte(`{"files":[{"path":"../a","content":"x","path":"b"}]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		b, err := ParseBody(raw)
		if err != nil {
			checkRefusal(t, err)
			var be *BodyError
			if !errors.As(err, &be) {
				t.Fatalf("refusal is %T, not *BodyError", err)
			}
			return
		}
		if err := b.Validate(); err != nil {
			t.Fatalf("ParseBody accepted an invalid body: %v", err)
		}
		for _, f := range b.Files {
			if r := checkPath(f.Path); r != "" {
				t.Fatalf("accepted path %q: %s", f.Path, r)
			}
			if _, err := f.Data(); err != nil {
				t.Fatal(err)
			}
			if m, err := f.FileMode(); err != nil || m&^0o777 != 0 {
				t.Fatalf("mode %v, %v", m, err)
			}
		}
		enc, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseBody(enc)
		if err != nil {
			t.Fatalf("canonical encoding of an accepted body refused: %v", err)
		}
		if back.Digest() != b.Digest() {
			t.Fatal("digest changed across a round trip")
		}
	})
}

func FuzzVerifyKeyring(f *testing.F) {
	k1, k2 := fuzzTrusted, testKey(3)
	set := signedSet{}
	current := Keyring{Mesh: "demo", Epoch: 1, Keys: []string{hexKey(k1)}, IssuedAt: t0}
	add := func(k Keyring, keys ...ed25519.PrivateKey) {
		f.Add(set.sign(f, PayloadTypeKeyring, []byte(encode(f, k)), keys...))
	}
	add(Keyring{Mesh: "demo", Epoch: 2, Keys: []string{hexKey(k1), hexKey(k2)}, IssuedAt: t0}, k1, k2)
	add(Keyring{Mesh: "demo", Epoch: 2, Keys: []string{hexKey(k1), hexKey(k2)}, IssuedAt: t0}, k1)
	add(Keyring{Mesh: "demo", Epoch: 2, Keys: []string{hexKey(k1), hexKey(k2)}, IssuedAt: t0}, k2)
	add(Keyring{Mesh: "demo", Epoch: 1, Keys: []string{hexKey(k1)}, IssuedAt: t0}, k1)
	add(Keyring{Mesh: "demo", Epoch: 0, Keys: []string{hexKey(k1)}, IssuedAt: t0}, k1)
	add(Keyring{Mesh: "evil", Epoch: 5, Keys: []string{hexKey(k1)}, IssuedAt: t0}, k1)
	f.Fuzz(func(t *testing.T, raw []byte) {
		next, err := VerifyKeyring(raw, current, "demo")
		if err != nil {
			checkRefusal(t, err)
			return
		}
		env, err := parseEnvelope(raw)
		if err != nil {
			t.Fatalf("VerifyKeyring accepted what the envelope parser refuses: %v", err)
		}
		if !set.has(PayloadTypeKeyring, env.Payload) {
			t.Fatalf("accepted a keyring the trusted key never signed: %q", env.Payload)
		}
		if next.Mesh != "demo" || next.Epoch < current.Epoch {
			t.Fatalf("accepted %+v", next)
		}
		keys, err := next.PublicKeys()
		if err != nil {
			t.Fatalf("accepted keyring with unusable keys: %v", err)
		}
		// Every key added must have signed the envelope that adds it: checked
		// against the envelope's own signatures, not only against the keys the
		// seeds know (a seed holds k1+k2 signed by k1 alone).
		curKeys, _ := current.PublicKeys()
		var added []ed25519.PublicKey
		for _, k := range keys {
			if !k.Equal(pub(k1)) && !bytes.Equal(k, pub(k2)) {
				t.Fatalf("accepted an unknown key %s", KeyID(k))
			}
			if !slices.ContainsFunc(curKeys, func(c ed25519.PublicKey) bool { return c.Equal(k) }) {
				added = append(added, k)
			}
		}
		if signed := verifySignatures(env, added); len(signed) != len(added) {
			t.Fatalf("accepted a keyring adding %d key(s), of which %d signed it", len(added), len(signed))
		}
	})
}

// FuzzVerifyMembership: whatever the bytes, VerifyMembership either refuses with a
// known code or accepts a membership the trusted key signed, for this mesh, not older
// than the one held, listing only canonical, distinct addresses.
func FuzzVerifyMembership(f *testing.F) {
	set := signedSet{}
	add := func(m Membership, keys ...ed25519.PrivateKey) {
		f.Add(set.sign(f, PayloadTypeMembership, []byte(encode(f, m)), keys...))
	}
	add(Membership{Mesh: "demo", Version: 2, Brokers: []string{"10.0.0.1:7300", "10.0.0.2:7300"}, IssuedAt: t0}, fuzzTrusted)
	add(Membership{Mesh: "demo", Version: 1, Brokers: []string{"10.0.0.1:7300"}, IssuedAt: t0}, fuzzTrusted)
	add(Membership{Mesh: "evil", Version: 9, Brokers: []string{"10.0.0.1:7300"}, IssuedAt: t0}, fuzzTrusted)
	add(Membership{Mesh: "demo", Version: 3, Brokers: []string{"[::1]:7300"}, IssuedAt: t0}, testKey(3))
	trusted := []ed25519.PublicKey{pub(fuzzTrusted)}
	f.Fuzz(func(t *testing.T, raw []byte) {
		m, err := VerifyMembership(raw, trusted, "demo", 1, []string{"10.0.0.1:7300"})
		if err != nil {
			checkRefusal(t, err)
			return
		}
		env, err := parseEnvelope(raw)
		if err != nil || !set.has(PayloadTypeMembership, env.Payload) {
			t.Fatalf("accepted a membership the trusted key never signed: %v", err)
		}
		if m.Mesh != "demo" || m.Version < 1 || m.check() != "" {
			t.Fatalf("accepted %+v", m)
		}
	})
}
