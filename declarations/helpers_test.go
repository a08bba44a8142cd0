package declarations

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// testKey returns a deterministic key pair; n tells keys apart.
func testKey(n byte) ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{n}, ed25519.SeedSize))
}

func pub(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

func hexKey(k ed25519.PrivateKey) string { return hex.EncodeToString(pub(k)) }

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// testNodeKey and otherNodeKey have the shape of nkey user public keys: the
// key web-1 enrolled with, and the key of an earlier enrolment of web-1.
var (
	testNodeKey  = "U" + strings.Repeat("A", 55)
	otherNodeKey = "U" + strings.Repeat("B", 55)
)

func strp(s string) *string { return &s }

func sampleBody() Body {
	return Body{Files: []File{
		{Path: "etc/app.conf", Content: strp("listen = 8080\n"), Mode: "0640", Owner: "app", Group: "app"},
		{Path: "bin/tool", ContentBase64: strp(base64.StdEncoding.EncodeToString([]byte{0, 1, 2, 0xff})), Mode: "0755"},
	}}
}

func sampleDecl() Declaration {
	return Declaration{
		Mesh: "demo", Node: "web-1", NodeKey: testNodeKey, Version: 3, KeyringEpoch: 1,
		IssuedAt: t0, ExpiresAt: t0.Add(DefaultValidity),
		Body: sampleBody(),
	}
}

func sampleExpect() Expect {
	return Expect{Mesh: "demo", Node: "web-1", NodeKey: testNodeKey, Now: t0.Add(time.Hour)}
}

func mustSign(t testing.TB, d Declaration, keys ...ed25519.PrivateKey) []byte {
	t.Helper()
	raw, err := SignDeclaration(d, keys...)
	if err != nil {
		t.Fatalf("SignDeclaration: %v", err)
	}
	return raw
}

// signPayload signs arbitrary payload bytes as a declaration, bypassing the
// checks SignDeclaration makes, to produce signed-but-bad declarations.
func signPayload(t testing.TB, payload string, keys ...ed25519.PrivateKey) []byte {
	t.Helper()
	raw, err := SignEnvelope(PayloadTypeDeclaration, []byte(payload), keys...)
	if err != nil {
		t.Fatalf("SignEnvelope: %v", err)
	}
	return raw
}

// declJSON encodes d the way SignDeclaration does, as a map so a test can
// change one field and re-encode.
func declMap(t testing.TB, d Declaration) map[string]any {
	t.Helper()
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func encode(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// decodeEnv decodes an envelope leniently so tests can tamper with it.
func decodeEnv(t testing.TB, raw []byte) Envelope {
	t.Helper()
	var env Envelope
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatal(err)
	}
	return env
}

// wantCode fails unless err has the given Code (and is nil for "").
func wantCode(t testing.TB, err error, code string) {
	t.Helper()
	if got := Code(err); got != code {
		t.Fatalf("Code(err) = %q, want %q; err = %v", got, code, err)
	}
}

func wantErrContains(t testing.TB, err error, sub string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), sub) {
		t.Fatalf("error %v does not mention %q", err, sub)
	}
}

func asBodyError(t testing.TB, err error) *BodyError {
	t.Helper()
	var be *BodyError
	if !errors.As(err, &be) {
		t.Fatalf("error %v (%T) is not a *BodyError", err, err)
	}
	return be
}
