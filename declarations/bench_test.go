package declarations

import (
	"crypto/ed25519"
	"strings"
	"testing"
)

// The benchmarks print the cost of signing and verifying a declaration next
// to the cost of the bare Ed25519 verification it contains (same message
// sizes), so the overhead of parsing and checking is visible in one run:
//
//	go test -run='^$' -bench=. ./declarations/

type benchCase struct {
	name string
	decl Declaration
}

func benchCases() []benchCase {
	small := sampleDecl()
	big := sampleDecl()
	// 64 KiB of config-like text in one file.
	line := "key_" + strings.Repeat("x", 27) + " = value\n" // 40 bytes
	content := strings.Repeat(line, 64<<10/len(line)+1)[:64<<10]
	big.Body = Body{Files: []File{{Path: "etc/big.conf", Content: &content, Mode: "0640"}}}
	return []benchCase{{"small", small}, {"64KiB", big}}
}

func reportPerOp(b *testing.B, envelope []byte) {
	b.ReportMetric(float64(len(envelope)), "envelope-B")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e3, "µs/op")
}

func BenchmarkSignDeclaration(b *testing.B) {
	k := testKey(1)
	for _, bc := range benchCases() {
		b.Run(bc.name, func(b *testing.B) {
			var raw []byte
			for b.Loop() {
				var err error
				if raw, err = SignDeclaration(bc.decl, k); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(int64(len(raw)))
			reportPerOp(b, raw)
		})
	}
}

// BenchmarkSignerDeclaration is what a control plane pays per node of a fleet-wide
// declaration: the body encoded once (outside the loop), each node's declaration
// signed by one Signer. BenchmarkSignDeclaration, beside it, encodes everything for
// each call.
func BenchmarkSignerDeclaration(b *testing.B) {
	s, err := NewSigner(testKey(1))
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range benchCases() {
		b.Run(bc.name, func(b *testing.B) {
			body, err := EncodeBody(bc.decl.Body)
			if err != nil {
				b.Fatal(err)
			}
			d := bc.decl
			d.Body = Body{}
			var raw []byte
			for b.Loop() {
				if raw, err = s.Declaration(d, body); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(int64(len(raw)))
			reportPerOp(b, raw)
		})
	}
}

func BenchmarkVerifyDeclaration(b *testing.B) {
	k := testKey(1)
	trusted := []ed25519.PublicKey{pub(k)}
	exp := sampleExpect()
	for _, bc := range benchCases() {
		b.Run(bc.name, func(b *testing.B) {
			raw := mustSign(b, bc.decl, k)
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				if _, err := VerifyDeclaration(raw, trusted, exp); err != nil {
					b.Fatal(err)
				}
			}
			reportPerOp(b, raw)
		})
	}
}

// BenchmarkEd25519Verify is the baseline: one ed25519.Verify over the same
// PAE bytes the declaration benchmarks sign and verify.
func BenchmarkEd25519Verify(b *testing.B) {
	k := testKey(1)
	for _, bc := range benchCases() {
		b.Run(bc.name, func(b *testing.B) {
			raw := mustSign(b, bc.decl, k)
			env := decodeEnv(b, raw)
			msg := PAE(env.PayloadType, env.Payload)
			sig := env.Signatures[0].Sig
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				if !ed25519.Verify(pub(k), msg, sig) {
					b.Fatal("signature does not verify")
				}
			}
			reportPerOp(b, raw)
		})
	}
}
