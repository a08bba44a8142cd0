package daemon

import (
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/state"
)

// largeBody is a declared body of one file of about size bytes, told apart by tag.
func largeBody(tag string, size int) []byte {
	return []byte(fmt.Sprintf(`{"files":[{"path":"etc/%s.conf","content":"%s"}]}`, tag, strings.Repeat("x", size)))
}

// signerBytes checks that s's count of the bytes it keeps is the sum of what it
// keeps, and returns the two counts.
func signerBytes(t *testing.T, s *signer) (envelopeBytes, bodyBytes int) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.cache {
		envelopeBytes += len(c.envelope)
	}
	for _, b := range s.bodies {
		bodyBytes += b.Len()
	}
	if envelopeBytes != s.cacheBytes || bodyBytes != s.bodyBytes {
		t.Fatalf("the signer counts %d bytes of envelopes and %d of bodies; it holds %d and %d", s.cacheBytes, s.bodyBytes, envelopeBytes, bodyBytes)
	}
	return envelopeBytes, bodyBytes
}

// TestTheSignersMemoryIsBoundedInBytes: the signer kept 4,096 envelopes and 1,024
// parsed bodies, whatever their size. An envelope carries its whole body: one
// declaration of a 256 KiB body sent to 5,000 nodes held 1.4 GiB on every control
// node, and a thousand bodies the state had dropped 700 MiB more (a review). Both
// are capped in bytes now, and the count of bytes stays true through evictions,
// forgotten nodes and a key rotation.
func TestTheSignersMemoryIsBoundedInBytes(t *testing.T) {
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s := newSigner([]ed25519.PrivateKey{k})
	now := time.Now().UTC()
	body := largeBody("big", 64<<10)
	key := "U" + strings.Repeat("A", 55)
	ins := make([]state.DeclarationInput, 700)
	for i := range ins {
		ins[i] = state.DeclarationInput{Mesh: "m", Node: fmt.Sprintf("n-%d", i), NodeKey: key,
			Declared:     state.Declared{Version: 1, BodyDigest: state.BodyDigest(body), IssuedAt: now, ExpiresAt: now.Add(time.Hour)},
			KeyringEpoch: 1, Body: body, BatchProofs: true}
	}
	b := s.batch(ins)
	for i := range ins {
		if _, err := b.envelope(i); err != nil {
			t.Fatal(err)
		}
	}
	envelopes, _ := signerBytes(t, s)
	if envelopes > maxCachedEnvelopeBytes || envelopes < maxCachedEnvelopeBytes/2 {
		t.Fatalf("after a fan-out of a 64 KiB body to 700 nodes the signer keeps %d MiB of envelopes, want at most %d MiB and most of it used",
			envelopes>>20, maxCachedEnvelopeBytes>>20)
	}
	// A node signed on its own, forgotten nodes: the count follows.
	if _, err := s.declaration(ins[0]); err != nil {
		t.Fatal(err)
	}
	s.forget([]string{"n-0", "n-1", "n-699"})
	signerBytes(t, s)
	s.setKeys([]ed25519.PrivateKey{k})
	if envelopes, _ := signerBytes(t, s); envelopes != 0 {
		t.Fatalf("after new keys the signer keeps %d bytes of envelopes", envelopes)
	}

	// Distinct bodies of 512 KiB each, as many as the count allowed: over the
	// bytes, bodies go one at a time, not all (cleared whole, a fleet of a few
	// hundred large bodies re-parsed one for nearly every node).
	defer func() {
		if _, n := signerBytes(t, s); n < maxBodyBytes/2 {
			t.Errorf("after many large bodies the signer keeps %d MiB of them, want the cap nearly full (bodies evicted one at a time)", n>>20)
		}
	}()
	for i := range maxBodies {
		raw := largeBody(fmt.Sprint(i), 512<<10)
		if _, err := s.encoded(state.BodyDigest(raw), raw); err != nil {
			t.Fatal(err)
		}
		if _, bodies := signerBytes(t, s); bodies > maxBodyBytes {
			t.Fatalf("after %d bodies of 512 KiB the signer keeps %d MiB of them, want at most %d MiB", i+1, bodies>>20, maxBodyBytes>>20)
		}
	}
}

// TestTheSweepDropsTheBodiesTheStateDropped: the signer's parsed copy of a body stayed
// after the state dropped it (no node declared it any more), until a thousand
// others came; the sweep drops it, and keeps the bodies the state holds.
func TestTheSweepDropsTheBodiesTheStateDropped(t *testing.T) {
	d := fleet(t, 1)
	kept := largeBody("kept", 1024)
	res, err := d.raft.Apply(state.Command{Op: state.OpDeclare, Declare: &state.DeclareCmd{Selector: state.Selector{All: true}, Body: kept}}, time.Minute)
	if err != nil || res.Err != nil {
		t.Fatal(err, res.Err)
	}
	gone := largeBody("gone", 1024)
	for _, raw := range [][]byte{kept, gone} {
		if _, err := d.signer.encoded(state.BodyDigest(raw), raw); err != nil {
			t.Fatal(err)
		}
	}
	d.forgetGoneNodes()
	have := map[string]bool{}
	for _, digest := range d.signer.bodyDigests() {
		have[digest] = true
	}
	if have[state.BodyDigest(gone)] || !have[state.BodyDigest(kept)] {
		t.Fatalf("after the sweep the signer keeps the dropped body: %v, the declared one: %v; want only the declared one",
			have[state.BodyDigest(gone)], have[state.BodyDigest(kept)])
	}
	signerBytes(t, d.signer)
}
