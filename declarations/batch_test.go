package declarations

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"testing"
)

// batchDecls returns n declarations of one body, one per node n-0 … n-(n-1), and
// their payloads as DeclarationPayload writes them.
func batchDecls(t testing.TB, n int) ([]Declaration, [][]byte) {
	t.Helper()
	body, err := EncodeBody(sampleBody())
	if err != nil {
		t.Fatal(err)
	}
	ds := make([]Declaration, n)
	payloads := make([][]byte, n)
	for i := range ds {
		d := sampleDecl()
		d.Node, d.Body = fmt.Sprintf("n-%d", i), Body{}
		ds[i] = d
		if payloads[i], err = AppendDeclarationPayload(nil, d, body); err != nil {
			t.Fatal(err)
		}
	}
	return ds, payloads
}

func signBatch(t testing.TB, payloads [][]byte, keys ...ed25519.PrivateKey) [][]byte {
	t.Helper()
	s, err := NewSigner(keys...)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.SignBatch(PayloadTypeDeclaration, payloads)
	if err != nil {
		t.Fatal(err)
	}
	if b.Len() != len(payloads) {
		t.Fatalf("Len = %d, want %d", b.Len(), len(payloads))
	}
	out := make([][]byte, len(payloads))
	for i := range payloads {
		if out[i], err = b.Envelope(i); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func expectFor(node string) Expect {
	exp := sampleExpect()
	exp.Node = node
	return exp
}

// Every envelope of a batch verifies for its node, whatever the size of the tree
// (sizes that are and are not powers of two, so that nodes carried up without a
// sibling are among them), with a proof no longer than the tree is deep, and says
// the same as a plain envelope of the same declaration.
func TestEveryEnvelopeOfABatchVerifies(t *testing.T) {
	keys := []ed25519.PrivateKey{testKey(1), testKey(2)}
	trusted := []ed25519.PublicKey{pub(keys[0]), pub(keys[1])}
	for _, n := range []int{1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 33, 100, 1025} {
		ds, payloads := batchDecls(t, n)
		envs := signBatch(t, payloads, keys...)
		for i, raw := range envs {
			var env Envelope
			if err := json.Unmarshal(raw, &env); err != nil {
				t.Fatalf("n=%d, %d: %v", n, i, err)
			}
			if n == 1 {
				if env.Batch != nil {
					t.Fatalf("a batch of one carries a proof: %s", raw)
				}
			} else if env.Batch == nil || env.Batch.depth() == 0 || env.Batch.depth() > bits.Len(uint(n-1)) {
				t.Fatalf("n=%d, %d: proof %+v, want 1 to %d hashes", n, i, env.Batch, bits.Len(uint(n-1)))
			}
			v, err := VerifyDeclaration(raw, trusted, expectFor(ds[i].Node))
			if err != nil {
				t.Fatalf("n=%d, envelope %d: %v", n, i, err)
			}
			if v.Node != ds[i].Node || len(v.SignedBy) != 2 {
				t.Fatalf("n=%d, envelope %d: verified %s signed by %v", n, i, v.Node, v.SignedBy)
			}
			plain := mustSign(t, func() Declaration { d := ds[i]; d.Body = sampleBody(); return d }(), keys...)
			pv, err := VerifyDeclaration(plain, trusted, expectFor(ds[i].Node))
			if err != nil || pv.BodyDigest != v.BodyDigest || pv.Version != v.Version {
				t.Fatalf("n=%d, envelope %d: the plain envelope verifies as %+v, %v", n, i, pv, err)
			}
		}
	}
}

// The hand-written encoding of a batch envelope is encoding/json's, byte for byte,
// and the strict decoder reads back what was written.
func TestBatchEnvelopeIsWhatEncodingJSONWrites(t *testing.T) {
	_, payloads := batchDecls(t, 13)
	for i, raw := range signBatch(t, payloads, testKey(1), testKey(2)) {
		var env Envelope
		if err := json.Unmarshal(raw, &env); err != nil {
			t.Fatal(err)
		}
		again, err := json.Marshal(env)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(raw, again) {
			t.Fatalf("envelope %d:\n hand %s\n json %s", i, raw, again)
		}
		var strict Envelope
		if err := decodeStrict(raw, &strict); err != nil {
			t.Fatalf("envelope %d: the strict decoder refuses it: %v", i, err)
		}
	}
}

// Salts are each leaf's own and fresh at each signing: the sibling hashes a node
// sees change even when the payloads do not.
func TestBatchSaltsAreFreshAndOwn(t *testing.T) {
	_, payloads := batchDecls(t, 4)
	a, b := signBatch(t, payloads, testKey(1)), signBatch(t, payloads, testKey(1))
	salts := map[string]bool{}
	for _, set := range [][][]byte{a, b} {
		for _, raw := range set {
			var env Envelope
			if err := json.Unmarshal(raw, &env); err != nil {
				t.Fatal(err)
			}
			if salts[string(env.Batch.Salt)] {
				t.Fatalf("salt %x used twice", env.Batch.Salt)
			}
			salts[string(env.Batch.Salt)] = true
		}
	}
}

// reencode decodes raw, lets change alter it, and encodes it again.
func reencode(t *testing.T, raw []byte, change func(*Envelope)) []byte {
	t.Helper()
	var env Envelope
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatal(err)
	}
	change(&env)
	out, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A proof altered in any part, a payload moved under another leaf's proof, or a
// signature moved between the two forms does not verify: it is untrusted (not
// from the keys this node trusts), never accepted, and never malformed, which is
// kept for what is not shaped as an envelope.
func TestAlteredBatchProofIsUntrusted(t *testing.T) {
	ds, payloads := batchDecls(t, 7)
	envs := signBatch(t, payloads, testKey(1))
	trusted := []ed25519.PublicKey{pub(testKey(1))}
	const target = 5 // an odd leaf: its first sibling is on the left
	var base Envelope
	if err := json.Unmarshal(envs[target], &base); err != nil {
		t.Fatal(err)
	}
	exp := expectFor(ds[target].Node)
	cases := map[string][]byte{}
	for i := range base.Batch.depth() {
		cases[fmt.Sprintf("path hash %d changed", i)] = reencode(t, envs[target], func(e *Envelope) { e.Batch.Path[i*32+7] ^= 1 })
		cases[fmt.Sprintf("index bit %d flipped", i)] = reencode(t, envs[target], func(e *Envelope) { e.Batch.Index ^= 1 << i })
	}
	cases["salt changed"] = reencode(t, envs[target], func(e *Envelope) { e.Batch.Salt[0] ^= 1 })
	cases["two path hashes swapped"] = reencode(t, envs[target], func(e *Envelope) {
		p := e.Batch.Path
		e.Batch.Path = append(append(append([]byte{}, p[32:64]...), p[:32]...), p[64:]...)
	})
	cases["another leaf's salt"] = reencode(t, envs[target], func(e *Envelope) {
		var o Envelope
		if err := json.Unmarshal(envs[target-1], &o); err != nil {
			t.Fatal(err)
		}
		e.Batch.Salt = o.Batch.Salt
	})
	cases["payload changed, proof kept"] = reencode(t, envs[target], func(e *Envelope) {
		e.Payload = bytes.Replace(e.Payload, []byte(`"version":3`), []byte(`"version":9`), 1)
	})
	cases["the proof dropped: the root's signature as a plain one"] = reencode(t, envs[target], func(e *Envelope) { e.Batch = nil })
	cases["a plain signature with a proof added"] = reencode(t, mustSign(t, func() Declaration {
		d := ds[target]
		d.Body = sampleBody()
		return d
	}(), testKey(1)), func(e *Envelope) { e.Batch = base.Batch })
	// A leaf that is an inner node: the two children of the root's left child
	// presented as a payload with the path above them. The leaf and node prefixes
	// keep its hash from being the node's.
	cases["an inner node presented as a leaf"] = reencode(t, envs[target], func(e *Envelope) {
		e.Batch.Path = e.Batch.Path[len(e.Batch.Path)-32:]
		e.Batch.Index = 1
		e.Payload = append(bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)...)
	})
	for name, raw := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := VerifyDeclaration(raw, trusted, exp)
			if !errors.Is(err, ErrUntrusted) {
				t.Fatalf("got %v, want ErrUntrusted", err)
			}
			if Code(err) != "untrusted" {
				t.Fatalf("code %q", Code(err))
			}
		})
	}
	// Another leaf's payload under this leaf's proof: each leaf's payload is bound
	// to its own place.
	for i := range envs {
		if i == target {
			continue
		}
		var o Envelope
		if err := json.Unmarshal(envs[i], &o); err != nil {
			t.Fatal(err)
		}
		raw := reencode(t, envs[target], func(e *Envelope) { e.Payload = o.Payload })
		if _, err := VerifyDeclaration(raw, trusted, expectFor(ds[i].Node)); !errors.Is(err, ErrUntrusted) {
			t.Fatalf("leaf %d's payload under leaf %d's proof: %v", i, target, err)
		}
	}
	// Untouched, it verifies, and for another node it is addressed elsewhere.
	if _, err := VerifyDeclaration(envs[target], trusted, exp); err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyDeclaration(envs[target], trusted, expectFor(ds[0].Node)); !errors.Is(err, ErrWrongAudience) {
		t.Fatalf("for another node: %v", err)
	}
}

// A proof of the wrong shape is malformed, named, before any signature is checked.
func TestMalformedBatchProof(t *testing.T) {
	ds, payloads := batchDecls(t, 5)
	envs := signBatch(t, payloads, testKey(1))
	trusted := []ed25519.PublicKey{pub(testKey(1))}
	raw := envs[2]
	hash := bytes.Repeat([]byte{7}, sha256.Size)
	cases := map[string]struct {
		raw  []byte
		want string
	}{
		"salt short": {reencode(t, raw, func(e *Envelope) { e.Batch.Salt = e.Batch.Salt[:15] }), "batch salt is 15 bytes"},
		"salt long":  {reencode(t, raw, func(e *Envelope) { e.Batch.Salt = append(e.Batch.Salt, 0) }), "batch salt is 17 bytes"},
		"no path":    {reencode(t, raw, func(e *Envelope) { e.Batch.Path = []byte{}; e.Batch.Index = 0 }), "batch path is empty"},
		"path too deep": {reencode(t, raw, func(e *Envelope) {
			e.Batch.Path = bytes.Repeat(hash, MaxBatchDepth+1)
		}), "batch path has 33 hashes"},
		"short hash":         {reencode(t, raw, func(e *Envelope) { e.Batch.Path = e.Batch.Path[:len(e.Batch.Path)-1] }), "not a whole number of 32-byte hashes"},
		"index past path":    {reencode(t, raw, func(e *Envelope) { e.Batch.Index |= 1 << e.Batch.depth() }), "bits beyond its path"},
		"index top bit":      {reencode(t, raw, func(e *Envelope) { e.Batch.Index |= 1 << 63 }), "bits beyond its path"},
		"proof on a keyring": {reencode(t, raw, func(e *Envelope) { e.PayloadType = PayloadTypeKeyring }), "only a declaration may"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := VerifyDeclaration(c.raw, trusted, expectFor(ds[2].Node))
			var me *MalformedError
			if !errors.As(err, &me) || me.Signed || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want malformed %q", err, c.want)
			}
		})
	}
	// The proof's own fields are read as strictly as the rest of the envelope.
	text := string(raw)
	i := strings.Index(text, `"batch":{`) + len(`"batch":{`)
	for name, bad := range map[string]string{
		"unknown field":   text[:i] + `"extra":1,` + text[i:],
		"field twice":     text[:i] + `"index":0,` + text[i:],
		"batch null":      text[:strings.Index(text, `,"batch"`)] + `,"batch":null}`,
		"index negative":  strings.Replace(text, `"index":`, `"index":-`, 1),
		"salt missing":    text[:i] + text[strings.Index(text, `"index"`):],
		"path a list":     text[:strings.Index(text, `"path":"`)] + `"path":["AA=="]}}`,
		"path not base64": text[:strings.Index(text, `"path":"`)] + `"path":"x"}}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := VerifyDeclaration([]byte(bad), trusted, expectFor(ds[2].Node))
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("got %v, want malformed", err)
			}
		})
	}
}

func TestSignBatchRefuses(t *testing.T) {
	s, err := NewSigner(testKey(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SignBatch(PayloadTypeDeclaration, nil); err == nil {
		t.Fatal("an empty batch signed")
	}
	if _, err := s.SignBatch(PayloadTypeKeyring, [][]byte{[]byte("a"), []byte("b")}); err == nil {
		t.Fatal("a batch of keyrings signed: no verifier takes a proof on a keyring")
	}
	if _, err := s.SignBatch(PayloadTypeDeclaration, [][]byte{[]byte("a"), nil}); err == nil {
		t.Fatal("an empty payload signed")
	}
	b, err := s.SignBatch(PayloadTypeDeclaration, [][]byte{[]byte("a"), []byte("b")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Envelope(2); err == nil {
		t.Fatal("an envelope past the batch made")
	}
	// A signature over PAE(PayloadTypeBatch, x) vouches for every leaf under x: no
	// envelope of that type is signed but by SignBatch, over a tree it hashed.
	root := bytes.Repeat([]byte{1}, 32)
	if _, err := s.Envelope(PayloadTypeBatch, root); err == nil {
		t.Fatal("an envelope of the batch root's type signed")
	}
	if _, err := SignEnvelope(PayloadTypeBatch, root, testKey(1)); err == nil {
		t.Fatal("SignEnvelope signed the batch root's type")
	}
}

func BenchmarkSignBatch(b *testing.B) {
	_, payloads := batchDecls(b, 10000)
	s, err := NewSigner(testKey(1))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("batch", func(b *testing.B) {
		for b.Loop() {
			sb, err := s.SignBatch(PayloadTypeDeclaration, payloads)
			if err != nil {
				b.Fatal(err)
			}
			for i := range payloads {
				if _, err := sb.Envelope(i); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(payloads))/1e3, "µs/node")
	})
	b.Run("one by one", func(b *testing.B) {
		for b.Loop() {
			for _, p := range payloads {
				if _, err := s.Envelope(PayloadTypeDeclaration, p); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(payloads))/1e3, "µs/node")
	})
}

func BenchmarkVerifyBatchDeclaration(b *testing.B) {
	ds, payloads := batchDecls(b, 10000)
	envs := signBatch(b, payloads, testKey(1))
	trusted := []ed25519.PublicKey{pub(testKey(1))}
	exp := expectFor(ds[4321].Node)
	plain := mustSign(b, func() Declaration { d := ds[4321]; d.Body = sampleBody(); return d }(), testKey(1))
	for name, raw := range map[string][]byte{"batch of 10000": envs[4321], "plain": plain} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if _, err := VerifyDeclaration(raw, trusted, exp); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(raw)), "envelope-bytes")
		})
	}
}

// TestARootSignatureDoesNotOpenAsAPlainEnvelope: a batch's signatures sign
// PAE(PayloadTypeBatch, root), which is also the plain PAE of an envelope of that
// type carrying the root as its payload: such an envelope is malformed, whatever the
// type asked for (a review found that it opened as a verified payload).
func TestARootSignatureDoesNotOpenAsAPlainEnvelope(t *testing.T) {
	_, payloads := batchDecls(t, 3)
	envs := signBatch(t, payloads, testKey(1))
	var e Envelope
	if err := json.Unmarshal(envs[0], &e); err != nil || e.Batch == nil {
		t.Fatalf("not a batch envelope: %v", err)
	}
	root := e.Batch.root(e.PayloadType, e.Payload)
	forged, err := json.Marshal(Envelope{PayloadType: PayloadTypeBatch, Payload: root[:], Signatures: e.Signatures})
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := OpenEnvelope(forged, PayloadTypeBatch, []ed25519.PublicKey{pub(testKey(1))})
	var malformed *MalformedError
	if !errors.As(err, &malformed) {
		t.Errorf("the root's signature opened as a plain envelope (%x), err %v; want malformed", p, err)
	}
}
