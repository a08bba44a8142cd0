package declarations

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

// docBlock returns the first ```json block after heading in docs/declarations.md,
// its line breaks taken out (the doc adds them).
func docBlock(t *testing.T, doc, heading string) []byte {
	t.Helper()
	_, after, ok := strings.Cut(doc, heading+"\n")
	if !ok {
		t.Fatalf("docs/declarations.md has no %q", heading)
	}
	_, block, ok := strings.Cut(after, "```json\n")
	if !ok {
		t.Fatalf("no json block after %q", heading)
	}
	block, _, _ = strings.Cut(block, "```")
	var b strings.Builder
	for _, line := range strings.Split(block, "\n") {
		b.WriteString(strings.TrimSpace(line))
	}
	return []byte(b.String())
}

// TestTheDocsEnvelopeVerifies: the envelope docs/declarations.md shows is a
// declaration this package verifies, signed by the key it names (the seed of 32
// bytes of 0x07), and carries the payload the same page shows. The example was a
// v1 envelope labelled v2, without node_key, which this package refused as
// untrusted (a docs walkthrough). MESH_PRINT_DOC_ENVELOPE=1 prints the envelope
// this package signs for that payload, to paste in.
func TestTheDocsEnvelopeVerifies(t *testing.T) {
	raw, err := os.ReadFile("../docs/declarations.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
	payload := docBlock(t, doc, "## The declaration payload")
	var d Declaration
	if err := json.Unmarshal(payload, &d); err != nil {
		t.Fatalf("the doc's payload: %v", err)
	}
	if os.Getenv("MESH_PRINT_DOC_ENVELOPE") != "" {
		env, err := SignDeclaration(d, key)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s", env)
	}
	env := docBlock(t, doc, "## The envelope")
	v, err := VerifyDeclaration(env, []ed25519.PublicKey{key.Public().(ed25519.PublicKey)},
		Expect{Mesh: d.Mesh, Node: d.Node, NodeKey: d.NodeKey, KeyringEpoch: d.KeyringEpoch, Now: d.IssuedAt.Add(time.Hour)})
	if err != nil {
		t.Fatalf("the doc's envelope: %v", err)
	}
	// The payload signed, byte for byte the doc's (a member the doc shows and the
	// type does not have would otherwise pass).
	var shown struct {
		Payload []byte `json:"payload"`
	}
	if err := json.Unmarshal(env, &shown); err != nil || !bytes.Equal(shown.Payload, payload) {
		t.Fatalf("the doc's envelope carries\n%s\nnot the doc's payload\n%s", shown.Payload, payload)
	}
	if v.Version != d.Version || v.Node != d.Node {
		t.Fatalf("verified as %+v", v.Declaration)
	}
	if pub := key.Public().(ed25519.PublicKey); !strings.Contains(doc, "public key `"+hex.EncodeToString(pub)+"`") {
		t.Fatalf("the doc does not name the key's public key %x", []byte(pub))
	}
}
