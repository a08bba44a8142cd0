package declarations

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// jsonEnvelope is how envelopes were encoded before Signer wrote them by hand, kept
// as the oracle the hand-written encoding must equal byte for byte: hosts and older
// control nodes compare and digest these bytes.
func jsonEnvelope(t testing.TB, payloadType string, payload []byte, keys ...ed25519.PrivateKey) []byte {
	t.Helper()
	msg := PAE(payloadType, payload)
	env := Envelope{PayloadType: payloadType, Payload: payload}
	for _, k := range keys {
		env.Signatures = append(env.Signatures, Signature{KeyID: KeyID(pub(k)), Sig: ed25519.Sign(k, msg)})
	}
	slices.SortFunc(env.Signatures, func(a, b Signature) int { return strings.Compare(a.KeyID, b.KeyID) })
	out, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// jsonDeclaration is the oracle for a declaration: encoding/json of d, enveloped.
func jsonDeclaration(t testing.TB, d Declaration, keys ...ed25519.PrivateKey) []byte {
	t.Helper()
	d.IssuedAt, d.ExpiresAt = d.IssuedAt.UTC(), d.ExpiresAt.UTC()
	payload, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return jsonEnvelope(t, PayloadTypeDeclaration, payload, keys...)
}

func TestSignerWritesWhatEncodingJSONWrites(t *testing.T) {
	keys := []ed25519.PrivateKey{testKey(1), testKey(2), testKey(3)}
	s, err := NewSigner(keys...)
	if err != nil {
		t.Fatal(err)
	}
	html := "<a href=\"x\">&amp;</a>\n\t\u2028 é \x7f"
	zone := time.FixedZone("east", 5*3600+1800)
	cases := map[string]Declaration{
		"sample": sampleDecl(),
		"empty body": func() Declaration {
			d := sampleDecl()
			d.Body = Body{}
			return d
		}(),
		"content that encoding/json escapes": func() Declaration {
			d := sampleDecl()
			d.Body = Body{Files: []File{{Path: "etc/<&>.html", Content: &html}}}
			return d
		}(),
		"nanoseconds and a zone": func() Declaration {
			d := sampleDecl()
			d.IssuedAt = time.Date(2031, 7, 9, 23, 59, 58, 120300000, zone)
			d.ExpiresAt = d.IssuedAt.Add(time.Nanosecond)
			return d
		}(),
		"largest numbers": func() Declaration {
			d := sampleDecl()
			d.Version, d.KeyringEpoch = 1<<64-1, 1<<64-1
			return d
		}(),
		"zero version": func() Declaration {
			d := sampleDecl()
			d.Version, d.KeyringEpoch = 0, 0
			return d
		}(),
	}
	for name, d := range cases {
		t.Run(name, func(t *testing.T) {
			want := jsonDeclaration(t, d, keys...)
			got, err := SignDeclaration(d, keys...)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("SignDeclaration wrote\n%s\nencoding/json writes\n%s", got, want)
			}
			body, err := EncodeBody(d.Body)
			if err != nil {
				t.Fatal(err)
			}
			head := d
			head.Body = Body{}
			if got, err = s.Declaration(head, body); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("Signer.Declaration: %v\n%s\nwant\n%s", err, got, want)
			}
			if _, err := VerifyDeclaration(got, []ed25519.PublicKey{pub(keys[1])}, Expect{Mesh: d.Mesh, Node: d.Node, NodeKey: d.NodeKey, Now: d.IssuedAt}); err != nil {
				t.Fatalf("what the signer wrote does not verify: %v", err)
			}
		})
	}
}

func TestSignerEnvelopeMatchesEncodingJSON(t *testing.T) {
	k := testKey(4)
	s, err := NewSigner(k)
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{PayloadTypeKeyring, "text/plain", `a"b`, `a\b`, "a<b>&c", "~!#$%'()*+,-./:;=?@[]^_`{|}"} {
		for _, payload := range [][]byte{[]byte("x"), []byte("{\"k\":1}"), bytes.Repeat([]byte{0, 0xff, '"'}, 100)} {
			want := jsonEnvelope(t, typ, payload, k)
			got, err := s.Envelope(typ, payload)
			if err != nil {
				t.Fatalf("%q: %v", typ, err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("type %q: Signer wrote\n%s\nencoding/json writes\n%s", typ, got, want)
			}
		}
	}
}

// FuzzSignerEncoding checks the hand-written encoding against encoding/json on
// declarations built from arbitrary ids, numbers, times and file contents: whatever
// SignDeclaration accepts, it must encode exactly as encoding/json would.
func FuzzSignerEncoding(f *testing.F) {
	f.Add("demo", "web-1", uint64(3), uint64(1), int64(t0.UnixNano()), int64(time.Hour), "etc/app.conf", "listen = 8080\n", "0640")
	f.Add("a", "b", uint64(0), uint64(0), int64(0), int64(1), "x", "<>&\"\\\u2028\x00", "")
	f.Add("m-1", "n-2", uint64(1<<63), uint64(7), int64(-1), int64(999999999), "a/b/c", "é", "7")
	keys := []ed25519.PrivateKey{testKey(5), testKey(6)}
	s, err := NewSigner(keys...)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, mesh, node string, version, epoch uint64, issuedNanos, validity int64, path, content, mode string) {
		d := Declaration{Mesh: mesh, Node: node, NodeKey: testNodeKey, Version: version, KeyringEpoch: epoch,
			IssuedAt: time.Unix(0, issuedNanos), ExpiresAt: time.Unix(0, issuedNanos).Add(time.Duration(validity)),
			Body: Body{Files: []File{{Path: path, Content: &content, Mode: mode}}}}
		got, err := SignDeclaration(d, keys...)
		if err != nil {
			return // refused input is the other tests' business
		}
		if want := jsonDeclaration(t, d, keys...); !bytes.Equal(got, want) {
			t.Fatalf("SignDeclaration wrote\n%s\nencoding/json writes\n%s", got, want)
		}
		body, err := EncodeBody(d.Body)
		if err != nil {
			t.Fatalf("SignDeclaration accepted a body EncodeBody refuses: %v", err)
		}
		d.Body = Body{}
		if again, err := s.Declaration(d, body); err != nil || !bytes.Equal(again, got) {
			t.Fatalf("Signer.Declaration differs from SignDeclaration: %v", err)
		}
	})
}

func TestNewSignerRefusesBadKeys(t *testing.T) {
	k := testKey(1)
	many := make([]ed25519.PrivateKey, MaxSignatures+1)
	for i := range many {
		many[i] = testKey(byte(10 + i))
	}
	for name, keys := range map[string][]ed25519.PrivateKey{
		"none":      nil,
		"too many":  many,
		"short key": {k[:31]},
		"twice":     {k, testKey(2), slices.Clone(k)},
	} {
		if _, err := NewSigner(keys...); err == nil {
			t.Errorf("%s: NewSigner accepted the keys", name)
		}
		if _, err := SignEnvelope(PayloadTypeKeyring, []byte("x"), keys...); err == nil {
			t.Errorf("%s: SignEnvelope accepted the keys", name)
		}
	}
}

func TestSignerDeclarationRefusesItsMisuse(t *testing.T) {
	s, err := NewSigner(testKey(1))
	if err != nil {
		t.Fatal(err)
	}
	body, err := EncodeBody(sampleBody())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Declaration(sampleDecl(), body); err == nil {
		t.Error("a declaration with a body of its own and an encoded one was signed")
	}
	head := sampleDecl()
	head.Body = Body{}
	if _, err := s.Declaration(head, EncodedBody{}); err == nil {
		t.Error("a declaration was signed with a body never encoded")
	}
	bad := head
	bad.Node = "Web_1"
	if _, err := s.Declaration(bad, body); err == nil || !strings.Contains(err.Error(), `node id "Web_1"`) {
		t.Errorf("a bad node id: %v", err)
	}
	var be *BodyError
	if _, err := EncodeBody(Body{Files: []File{{Path: "../etc/passwd", Content: strp("x")}}}); !errors.As(err, &be) {
		t.Errorf("EncodeBody of a path outside the root: %v, want a *BodyError", err)
	}
	if _, err := EncodeBody(Body{Files: []File{{Path: "a", Content: strp("x"), Mode: "0999"}}}); !errors.As(err, &be) || !strings.Contains(be.Reason, `mode "0999"`) {
		t.Errorf("EncodeBody of a bad mode: %v", err)
	}
}

// A Signer reuses its buffers across signings: envelopes signed at once from
// several goroutines must each be the one encoding/json would write.
func TestSignerConcurrentSigningsStayApart(t *testing.T) {
	keys := []ed25519.PrivateKey{testKey(7)}
	s, err := NewSigner(keys...)
	if err != nil {
		t.Fatal(err)
	}
	body, err := EncodeBody(sampleBody())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				d := sampleDecl()
				d.Node = strings.Repeat("n", 1+(g*50+i)%60)
				d.Version = uint64(g*1000 + i)
				want := jsonDeclaration(t, d, keys...)
				d.Body = Body{}
				got, err := s.Declaration(d, body)
				if err != nil || !bytes.Equal(got, want) {
					t.Errorf("goroutine %d signing %d: %v\n%s\nwant\n%s", g, i, err, got, want)
					return
				}
			}
		})
	}
	wg.Wait()
}
