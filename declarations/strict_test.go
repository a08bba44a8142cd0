package declarations

import (
	"encoding/base64"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// The differential tests hold the byte-level scanner (decodeStrict) to the walker
// it replaced (oracleDecodeStrict, strict_oracle_test.go): for every input and
// every wire type, both accept with equal values, or both refuse with the same
// message.

// strictTarget is one wire type to decode into.
type strictTarget struct {
	name string
	new  func() any // a pointer to a zero value
}

func strictTargets() []strictTarget {
	return []strictTarget{
		{"Envelope", func() any { return new(Envelope) }},
		{"Declaration", func() any { return new(Declaration) }},
		{"Body", func() any { return new(Body) }},
		{"Keyring", func() any { return new(Keyring) }},
		{"Revocation", func() any { return new(Revocation) }},
		{"Membership", func() any { return new(Membership) }},
	}
}

// checkSameAsOracle fails unless decodeStrict and the oracle agree on raw.
// wherever is a refusal without where in the input it was found: the scanner says
// where by line and column, encoding/json by an offset that inside a value is not
// its place in the input (TestASyntaxErrorSaysItsLineAndColumn checks the place).
func wherever(msg string) string {
	return syntaxPlace.ReplaceAllString(msg, "not valid JSON at …:")
}

var syntaxPlace = regexp.MustCompile(`not valid JSON at (byte \d+|line \d+, column \d+):`)

func checkSameAsOracle(t *testing.T, target strictTarget, raw []byte) {
	t.Helper()
	got, want := target.new(), target.new()
	gotErr, wantErr := decodeStrict(raw, got), oracleDecodeStrict(raw, want)
	switch {
	case (gotErr == nil) != (wantErr == nil):
		t.Fatalf("%s %q: scanner says %v, walker says %v", target.name, raw, gotErr, wantErr)
	case gotErr != nil && wherever(gotErr.Error()) != wherever(wantErr.Error()):
		t.Fatalf("%s %q: scanner refuses with\n\t%v\nwalker with\n\t%v", target.name, raw, gotErr, wantErr)
	case !reflect.DeepEqual(got, want):
		t.Fatalf("%s %q: scanner decodes\n\t%#v\nwalker\n\t%#v", target.name, raw, got, want)
	}
}

// strictSeeds are inputs that reach each rule and each syntax error of the
// decoder, valid ones and their near misses.
func strictSeeds(t testing.TB) []string {
	d := sampleDecl()
	d.IssuedAt = d.IssuedAt.UTC()
	env, err := SignDeclaration(d, testKey(1))
	if err != nil {
		t.Fatal(err)
	}
	return []string{
		string(env),
		encode(t, d),
		encode(t, d.Body),
		encode(t, Keyring{Mesh: "demo", Epoch: 2, Keys: []string{hexKey(testKey(1))}, IssuedAt: t0}),
		encode(t, Revocation{Mesh: "demo", Node: "web-1", NodeKey: testNodeKey, RevokedAt: t0}),
		encode(t, Membership{Mesh: "demo", Version: 1, Brokers: []string{"10.0.0.1:7300"}, IssuedAt: t0}),
		// Shape.
		``, ` `, `{`, `}`, `[`, `]`, `,`, `:`, `x`, `  x`, `"`, `{}`, `[]`, `null`, `true`, `1`, `"s"`,
		`{} `, `{}x`, `{} {}`, `{}]`, `{"files":[]}`, `{"files":[]}  `, `{"files":[],}`, `{,}`, `{"files" []}`,
		`{"files":}`, `{"files":[]"x"}`, `{"files":[] "x":1}`, `{"files":[]]`, `{]`, `{{`, `{1:2}`, `{"files"`,
		`{"files":`, `{"files":[`, `{"files":[{`, `{"files":[1 2]}`, `{"files":[1,]}`, `{"files":[,]}`,
		`{"files":[}`, `{"files":[{]}`, `{"files":[{}}`, `{"files":[[]]}`, `{"files":{}}`, `{"files":null}`,
		`{"files":[null]}`, `{"Files":[]}`, `{"files":[],"files":[]}`, `{"fil\u0065s":[]}`, `{"files":[]}` + "\x00",
		`{"files":[{"path":"a","content":"x"}]}`, `{"files":[{"path":"a","content":null}]}`,
		`{"files":[{"path":"a","content":1}]}`, `{"files":[{"path":1}]}`, `{"files":[{"content":"x"}]}`,
		`{"files":[{"path":"a","path":"b"}]}`, `{"files":[{"path":"a","mode":true}]}`, `{"files":[{"path":"a","x":1}]}`,
		`{"files":[{"path":"a\u0000b\ud800\udc00\ud800x\udc00\u00e9\n\t\"\\\/\b\f\r"}]}`,
		`{"files":[{"path":"\ud800\ud800"}]}`, `{"files":[{"path":"\ud83d\ude00"}]}`, `{"files":[{"path":"\uD83D\uDE00"}]}`,
		`{"files":[{"path":"a\x"}]}`, `{"files":[{"path":"a\u12"}]}`, `{"files":[{"path":"a\u12g4"}]}`, `{"files":[{"path":"a` + "\n" + `"}]}`,
		`{"files":[{"path":"a\`, `{"files":[{"path":"a\u`, `{"files":[{"path":"é` + "\xff" + `"}]}`, `{"files":[{"path":"é"}]}`,
		`{"files":[{"path":"a` + "\x1f" + `"}]}`, `{"files":[{"path":"a` + "\x7f\t" + `"}]}`, "{\"files\"\t:\r[\n]\n}",
		// Numbers and literals.
		`{"mesh":"demo","version":0}`, `{"mesh":"demo","version":18446744073709551615}`,
		`{"mesh":"demo","version":18446744073709551616}`, `{"mesh":"demo","version":-1}`, `{"mesh":"demo","version":-0}`,
		`{"mesh":"demo","version":1.0}`, `{"mesh":"demo","version":1e3}`, `{"mesh":"demo","version":1E+3}`,
		`{"mesh":"demo","version":01}`, `{"mesh":"demo","version":-}`, `{"mesh":"demo","version":-x}`, `{"mesh":"demo","version":1.}`,
		`{"mesh":"demo","version":1.x}`, `{"mesh":"demo","version":1e}`, `{"mesh":"demo","version":1e+}`, `{"mesh":"demo","version":1ex}`,
		`{"mesh":"demo","version":"1"}`, `{"mesh":"demo","version":tru}`, `{"mesh":"demo","version":trux}`, `{"mesh":"demo","version":true}`,
		`{"mesh":"demo","version":fals}`, `{"mesh":"demo","version":nul}`, `{"mesh":"demo","version":nulx}`, `{"mesh":"demo","version":null}`,
		`{"mesh":"demo","version":1x}`, `{"mesh":"demo","version":+1}`, `{"mesh":"demo","version":.5}`, `{"mesh":"demo","version":1`,
		`{"mesh":"demo","version":-`, `{"mesh":"demo","version":t`, `{"mesh":"demo","version":1 2}`,
		// Times and base64.
		`{"mesh":"demo","epoch":1,"keys":[],"issued_at":"2025-03-01T12:00:00Z"}`,
		`{"mesh":"demo","epoch":1,"keys":[],"issued_at":"2025-03-01T12:00:00.5+01:00"}`,
		`{"mesh":"demo","epoch":1,"keys":[],"issued_at":"2025-03-01 12:00:00Z"}`,
		`{"mesh":"demo","epoch":1,"keys":[],"issued_at":"2025-03-01T12:00:00z"}`,
		`{"mesh":"demo","epoch":1,"keys":[],"issued_at":"2025-03-01T24:00:00Z"}`,
		`{"mesh":"demo","epoch":1,"keys":[],"issued_at":1}`, `{"mesh":"demo","epoch":1,"keys":[],"issued_at":"\u0032025-03-01T12:00:00Z"}`,
		`{"payloadType":"t","payload":"eA==","signatures":[{"keyid":"k","sig":""}]}`,
		`{"payloadType":"t","payload":"eA=","signatures":[]}`, `{"payloadType":"t","payload":"eB==","signatures":[]}`,
		`{"payloadType":"t","payload":"eA==\n","signatures":[]}`, `{"payloadType":"t","payload":"eA\r\n==","signatures":[]}`,
		`{"payloadType":"t","payload":"e A==","signatures":[]}`, `{"payloadType":"t","payload":"eA","signatures":[]}`,
		`{"payloadType":"t","payload":"eA==eA==","signatures":[]}`, `{"payloadType":"t","payload":"-_8=","signatures":[]}`,
		`{"payloadType":"t","payload":"\u0065A==","signatures":[]}`, `{"payloadType":"t","payload":1,"signatures":[]}`,
		`{"payloadType":"t","payload":"","signatures":[{}]}`, `{"payloadType":"t","signatures":[]}`,
	}
}

func TestStrictScannerMatchesWalker(t *testing.T) {
	for _, raw := range strictSeeds(t) {
		for _, target := range strictTargets() {
			checkSameAsOracle(t, target, []byte(raw))
			// Every prefix too: truncation at each byte.
			for n := range len(raw) {
				checkSameAsOracle(t, target, []byte(raw[:n]))
			}
		}
	}
}

func TestStrictLeavesTargetOnRefusal(t *testing.T) {
	k := Keyring{Mesh: "kept"}
	if err := decodeStrict([]byte(`{"mesh":"demo","epoch":1,"keys":[],"issued_at":1}`), &k); err == nil || k.Mesh != "kept" {
		t.Fatalf("refused input changed the target: %+v, %v", k, err)
	}
}

// FuzzStrictDifferential: whatever the bytes, the scanner and the walker agree,
// for every wire type.
func FuzzStrictDifferential(f *testing.F) {
	for _, s := range strictSeeds(f) {
		f.Add([]byte(s))
	}
	targets := strictTargets()
	f.Fuzz(func(t *testing.T, raw []byte) {
		for _, target := range targets {
			checkSameAsOracle(t, target, raw)
		}
	})
}

// FuzzCanonicalBase64: the check without re-encoding accepts exactly what
// decodes and encodes back to the same text.
func FuzzCanonicalBase64(f *testing.F) {
	for _, s := range []string{"", "eA==", "eA=", "eB==", "eA==\n", "eA\r\n==", "AAE=", "AAEC", "-_8=", "eA==eA==", "====", "e==="} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := decodeCanonicalBase64(s)
		want, wantOK := oracleCanonicalBase64(s)
		if ok != wantOK || ok && string(got) != string(want) {
			t.Fatalf("%q: %x %v, want %x %v", s, got, ok, want, wantOK)
		}
		if ok && base64.StdEncoding.EncodeToString(got) != s {
			t.Fatalf("%q accepted but is not canonical", s)
		}
	})
}

// BenchmarkDecodeStrict compares the scanner with the walker it replaced, on a
// signed envelope and its declaration payload.
func BenchmarkDecodeStrict(b *testing.B) {
	d := sampleDecl()
	env, err := SignDeclaration(d, testKey(1))
	if err != nil {
		b.Fatal(err)
	}
	payload := []byte(encode(b, Declaration{Mesh: d.Mesh, Node: d.Node, NodeKey: d.NodeKey, Version: d.Version,
		KeyringEpoch: d.KeyringEpoch, IssuedAt: d.IssuedAt.UTC(), ExpiresAt: d.ExpiresAt.UTC(), Body: d.Body}))
	line := "key_" + strings.Repeat("x", 27) + " = value\n"
	content := strings.Repeat(line, 64<<10/len(line)+1)[:64<<10]
	big := Body{Files: []File{{Path: "etc/big.conf", Content: &content}}}
	bigRaw := []byte(encode(b, big))
	for _, c := range []struct {
		name string
		raw  []byte
		v    func() any
	}{
		{"envelope", env, func() any { return new(Envelope) }},
		{"declaration", payload, func() any { return new(Declaration) }},
		{"body-64KiB", bigRaw, func() any { return new(Body) }},
	} {
		for _, dec := range []struct {
			name string
			fn   func([]byte, any) error
		}{{"scanner", decodeStrict}, {"walker", oracleDecodeStrict}} {
			b.Run(c.name+"/"+dec.name, func(b *testing.B) {
				b.SetBytes(int64(len(c.raw)))
				for b.Loop() {
					if err := dec.fn(c.raw, c.v()); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e3, "µs/op")
			})
		}
	}
}

// TestASyntaxErrorSaysItsLineAndColumn (a walkthrough): "not valid JSON at byte 52"
// sent an operator counting the bytes of a body file of many lines; inside a value
// the byte was not even the input's. Said by line and column, in characters.
func TestASyntaxErrorSaysItsLineAndColumn(t *testing.T) {
	for body, want := range map[string]string{
		"{\"files\": [\n  {\"path\": \"a\" \"content\": \"x\"}\n]}":        "not valid JSON at line 2, column 16: invalid character '\"' after object key:value pair",
		"{\"files\": [\n  {\"path\": \"é\", \"content\": \"x\u0001\"}\n]}": "not valid JSON at line 2, column 30: invalid character '\\x01' in string literal",
		"{\"files\": [\n  {\"path\": \"a\",, }\n]}":                        "not valid JSON at line 2, column 16: invalid character ',' looking for beginning of object key string",
	} {
		_, err := ParseBody([]byte(body))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", body, err, want)
		}
	}
}
