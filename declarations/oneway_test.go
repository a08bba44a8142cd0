package declarations

import (
	"crypto/ed25519"
	"strings"
	"testing"
)

// TestOneWayOnlyEverySignedDocument: a signature covers bytes, so the bytes must be
// read one way only. encoding/json reads {"Version":1,"version":2} as version 2
// and {"version":2,"version":1} as version 1, where a reader that keeps the first
// member, or compares names exactly, reads otherwise: the classic attack on signed
// JSON. For every kind of signed document, a member twice, a member beside its
// twin in another case, and a member named only in another case, at the top and
// nested, each validly signed by a trusted key, are refused as malformed before
// any of their values is believed. The untouched document of each kind is
// accepted, so each refusal is for the fault it names.
func TestOneWayOnlyEverySignedDocument(t *testing.T) {
	k := testKey(1)
	trusted := []ed25519.PublicKey{pub(k)}
	kinds := []struct {
		name, typ string
		payload   string
		verify    func(raw []byte) error
		members   []string // members to double and to respell, "a.b" for nested
	}{
		{
			"declaration", PayloadTypeDeclaration, encode(t, sampleDecl()),
			func(raw []byte) error { _, err := VerifyDeclaration(raw, trusted, sampleExpect()); return err },
			[]string{"mesh", "node", "node_key", "version", "keyring_epoch", "issued_at", "expires_at", "body", "body.files", "body.files.path", "body.files.mode"},
		},
		{
			"keyring", PayloadTypeKeyring, encode(t, Keyring{Mesh: "demo", Epoch: 1, Keys: []string{hexKey(k)}, IssuedAt: t0}),
			func(raw []byte) error {
				_, err := VerifyKeyring(raw, Keyring{Epoch: 0, Keys: []string{hexKey(k)}}, "demo")
				return err
			},
			[]string{"mesh", "epoch", "keys", "issued_at"},
		},
		{
			"membership", PayloadTypeMembership, encode(t, sampleMembership()),
			func(raw []byte) error { _, err := VerifyMembership(raw, trusted, "demo", 2, nil); return err },
			[]string{"mesh", "version", "brokers", "issued_at"},
		},
		{
			"revocation", PayloadTypeRevocation, encode(t, Revocation{Mesh: "demo", Node: "web-1", NodeKey: testNodeKey, RevokedAt: t0}),
			func(raw []byte) error {
				_, err := VerifyRevocation(raw, trusted, "demo", "web-1", testNodeKey)
				return err
			},
			[]string{"mesh", "node", "node_key", "revoked_at"},
		},
	}
	for _, kind := range kinds {
		t.Run(kind.name, func(t *testing.T) {
			sign := func(payload string) []byte { return must(SignEnvelope(kind.typ, []byte(payload), k)) }
			if err := kind.verify(sign(kind.payload)); err != nil {
				t.Fatalf("the document itself is refused: %v", err)
			}
			for _, member := range kind.members {
				key := member[strings.LastIndexByte(member, '.')+1:]
				quoted := `"` + key + `":`
				if !strings.Contains(kind.payload, quoted) {
					t.Fatalf("%s is not in %s", key, kind.payload)
				}
				value := valueAfter(t, kind.payload, quoted)
				upper := `"` + strings.ToUpper(key[:1]) + key[1:] + `":`
				for variant, payload := range map[string]string{
					// The same member again, right after itself: the last one wins
					// in encoding/json.
					"twice": strings.Replace(kind.payload, quoted+value, quoted+value+","+quoted+value, 1),
					// Its twin in another case first ({"Version":1,"version":2}).
					"beside its twin in another case": strings.Replace(kind.payload, quoted, upper+value+","+quoted, 1),
					// Only in another case: encoding/json fills the field anyway.
					"only in another case": strings.Replace(kind.payload, quoted, upper, 1),
				} {
					err := kind.verify(sign(payload))
					if Code(err) != "malformed" {
						t.Errorf("%s %s: %v (code %q), want malformed\n%s", member, variant, err, Code(err), payload)
					}
				}
			}
			// The envelope's own members, likewise.
			good := string(sign(kind.payload))
			for _, key := range []string{"payloadType", "payload", "signatures", "keyid", "sig"} {
				for variant, env := range memberVariants(t, good, key) {
					if err := kind.verify([]byte(env)); Code(err) != "malformed" {
						t.Errorf("envelope %s %s: %v (code %q), want malformed", key, variant, err, Code(err))
					}
				}
			}
		})
	}
	// A batch envelope's proof and its members, likewise (decision 0034).
	var payloads [][]byte
	for _, node := range []string{"web-1", "db-1", "db-2"} {
		d := sampleDecl()
		d.Node = node
		payloads = append(payloads, []byte(encode(t, d)))
	}
	signer, err := NewSigner(k)
	if err != nil {
		t.Fatal(err)
	}
	b, err := signer.SignBatch(PayloadTypeDeclaration, payloads)
	if err != nil {
		t.Fatal(err)
	}
	env, err := b.Envelope(0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyDeclaration(env, trusted, sampleExpect()); err != nil {
		t.Fatalf("the batch envelope itself is refused: %v", err)
	}
	for _, key := range []string{"batch", "salt", "index", "path"} {
		for variant, env := range memberVariants(t, string(env), key) {
			if _, err := VerifyDeclaration([]byte(env), trusted, sampleExpect()); Code(err) != "malformed" {
				t.Errorf("batch envelope %s %s: %v (code %q), want malformed", key, variant, err, Code(err))
			}
		}
	}
	// A payload whose twin member says something else entirely: the signature
	// holds, and the verifier refuses it rather than read either value.
	d := sampleDecl()
	payload := strings.Replace(encode(t, d), `"version":3`, `"Version":1,"version":3`, 1)
	if _, err := VerifyDeclaration(must(SignEnvelope(PayloadTypeDeclaration, []byte(payload), k)), trusted, sampleExpect()); Code(err) != "malformed" {
		t.Fatalf(`{"Version":1,"version":3}: %v, want malformed`, err)
	}
}

// memberVariants returns doc with its member key (the first one of that name)
// given twice, beside its twin in another letter case, and only in another case:
// what encoding/json reads one way and another reader another.
func memberVariants(t *testing.T, doc, key string) map[string]string {
	t.Helper()
	quoted := `"` + key + `":`
	value := valueAfter(t, doc, quoted)
	upper := `"` + strings.ToUpper(key[:1]) + key[1:] + `":`
	return map[string]string{
		"twice":                           strings.Replace(doc, quoted+value, quoted+value+","+quoted+value, 1),
		"beside its twin in another case": strings.Replace(doc, quoted, upper+value+","+quoted, 1),
		"only in another case":            strings.Replace(doc, quoted, upper, 1),
	}
}

// valueAfter returns the JSON value that follows prefix in doc, as written.
func valueAfter(t *testing.T, doc, prefix string) string {
	t.Helper()
	i := strings.Index(doc, prefix)
	if i < 0 {
		t.Fatalf("%s not in %s", prefix, doc)
	}
	rest := doc[i+len(prefix):]
	depth, inString, escaped := 0, false, false
	for j, c := range rest {
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			if depth == 0 {
				return rest[:j]
			}
			depth--
			if depth == 0 {
				return rest[:j+1]
			}
		case c == ',' && depth == 0:
			return rest[:j]
		}
	}
	t.Fatalf("no end to the value after %s", prefix)
	return ""
}
