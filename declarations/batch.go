package declarations

import (
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"strconv"
)

// A declaration to a whole fleet is one payload per node, each naming its node:
// signed one by one, the control plane pays an Ed25519 signature per node (most of
// its CPU in a fan-out). Signed as a batch, the payloads are the leaves of a hash
// tree and each key signs the tree's root once; each node's envelope carries the
// proof that its payload is a leaf under that root (Batch). A verifier hashes the
// exact payload bytes it received up the proof to a root and checks the signatures
// over that root, before it parses anything, so a batch envelope proves what a
// plain one proves (decision 0034).
const (
	// PayloadTypeBatch is the type the root of a batch is signed under:
	// PAE(PayloadTypeBatch, root). No other envelope is signed under it, so a
	// signature over a root verifies as nothing but a root, and a signature over a
	// payload never as a root.
	PayloadTypeBatch = "application/vnd.mesh.batch.v1"

	// BatchSaltSize is the size of a leaf's salt: random bytes of its own, so that
	// the hashes of the other nodes' leaves a proof carries tell a node nothing
	// about their payloads.
	BatchSaltSize = 16
	// MaxBatchDepth bounds a proof's path: 2^32 leaves is more than any fleet.
	MaxBatchDepth = 32
)

// Batch is the proof that an envelope's payload is a leaf of a tree whose root its
// signatures sign. The tree is RFC 6962's hashing with a salt in each leaf:
//
//	leaf = SHA-256(0x00 || salt || PAE(payloadType, payload))
//	node = SHA-256(0x01 || left || right)
//
// Path is the sibling hashes from the leaf up, 32 bytes each, one after the other
// (a node without a sibling at a level is carried up as it is, and the level has
// none); bit i of Index is 1 when the i-th is the left one.
type Batch struct {
	Salt  []byte `json:"salt"`
	Index uint64 `json:"index"`
	Path  []byte `json:"path"`
}

// depth is the number of hashes in b's path.
func (b *Batch) depth() int { return len(b.Path) / sha256.Size }

// checkBatch returns why b is not a well-formed proof for an envelope of
// payloadType, or "".
func checkBatch(b *Batch, payloadType string) string {
	if payloadType != PayloadTypeDeclaration {
		return fmt.Sprintf("it carries a batch proof, which only a declaration may (payload type %q)", payloadType)
	}
	if len(b.Salt) != BatchSaltSize {
		return fmt.Sprintf("batch salt is %d bytes, want %d", len(b.Salt), BatchSaltSize)
	}
	switch n := len(b.Path); {
	case n == 0:
		return "batch path is empty (a batch of one leaf is signed as a plain envelope)"
	case n%sha256.Size != 0:
		return fmt.Sprintf("batch path is %d bytes, not a whole number of %d-byte hashes", n, sha256.Size)
	case n > MaxBatchDepth*sha256.Size:
		return fmt.Sprintf("batch path has %d hashes, at most %d are allowed", n/sha256.Size, MaxBatchDepth)
	}
	if b.Index>>b.depth() != 0 {
		// One spelling per proof: bits past the path would change the bytes, not
		// the proof.
		return fmt.Sprintf("batch index %d has bits beyond its path of %d hashes", b.Index, b.depth())
	}
	return ""
}

// root hashes payload (of payloadType) with its salt up b's path. b passed
// checkBatch.
func (b *Batch) root(payloadType string, payload []byte) [sha256.Size]byte {
	h := sha256.New()
	sum := leafHash(h, b.Salt, payloadType, payload)
	for i := range b.depth() {
		sib := b.Path[i*sha256.Size : (i+1)*sha256.Size]
		if b.Index>>i&1 == 1 {
			sum = nodeHash(sib, sum[:])
		} else {
			sum = nodeHash(sum[:], sib)
		}
	}
	return sum
}

// signedMessage is what an envelope's signatures sign: PAE of its type and payload,
// or, for a batch, PAE(PayloadTypeBatch, root).
func (env *Envelope) signedMessage() []byte {
	if env.Batch == nil {
		return PAE(env.PayloadType, env.Payload)
	}
	r := env.Batch.root(env.PayloadType, env.Payload)
	return PAE(PayloadTypeBatch, r[:])
}

func leafHash(h hash.Hash, salt []byte, payloadType string, payload []byte) (sum [sha256.Size]byte) {
	h.Reset()
	var head [64]byte
	b := append(head[:0], 0x00)
	b = append(b, salt...)
	h.Write(b)
	// PAE(payloadType, payload), written in its parts: the payload is not copied.
	b = append(head[:0], "DSSEv1 "...)
	b = strconv.AppendInt(b, int64(len(payloadType)), 10)
	b = append(b, ' ')
	h.Write(b)
	h.Write([]byte(payloadType))
	b = append(head[:0], ' ')
	b = strconv.AppendInt(b, int64(len(payload)), 10)
	b = append(b, ' ')
	h.Write(b)
	h.Write(payload)
	h.Sum(sum[:0])
	return sum
}

func nodeHash(left, right []byte) [sha256.Size]byte {
	var buf [1 + 2*sha256.Size]byte
	buf[0] = 0x01
	copy(buf[1:], left)
	copy(buf[1+sha256.Size:], right)
	return sha256.Sum256(buf[:])
}

// SignedBatch is a batch of payloads of one type signed as one tree: Envelope(i)
// is payload i's envelope. A batch of one payload is signed as a plain envelope.
// Its methods may be called from several goroutines at once.
type SignedBatch struct {
	s           *Signer
	payloadType string
	payloads    [][]byte
	salts       []byte
	// levels[0] are the leaves' hashes, each level the one above the last; the
	// last level holds the root.
	levels [][][sha256.Size]byte
	sigs   []Signature
}

// SignBatch checks each payload as Envelope does, hashes them into a tree and signs
// its root with every key of s. The payloads are kept, not copied: they must not
// change until the batch's envelopes are made.
func (s *Signer) SignBatch(payloadType string, payloads [][]byte) (*SignedBatch, error) {
	if payloadType != PayloadTypeDeclaration {
		// The verifier refuses a proof on any other type.
		return nil, fmt.Errorf("declarations: cannot sign a batch of %q: only declarations are signed in batches", payloadType)
	}
	if len(payloads) == 0 {
		return nil, errors.New("declarations: cannot sign an empty batch")
	}
	if uint64(len(payloads)) > 1<<MaxBatchDepth {
		return nil, fmt.Errorf("declarations: cannot sign a batch of %d payloads; at most 2^%d", len(payloads), MaxBatchDepth)
	}
	for i, p := range payloads {
		if len(p) == 0 {
			return nil, fmt.Errorf("declarations: cannot sign an empty payload (batch entry %d)", i)
		}
	}
	b := &SignedBatch{s: s, payloadType: payloadType, payloads: payloads}
	if len(payloads) == 1 {
		b.sigs = s.signatures(PAE(payloadType, payloads[0]))
		return b, nil
	}
	b.salts = make([]byte, BatchSaltSize*len(payloads))
	rand.Read(b.salts)
	h := sha256.New()
	level := make([][sha256.Size]byte, len(payloads))
	for i, p := range payloads {
		level[i] = leafHash(h, b.salts[i*BatchSaltSize:(i+1)*BatchSaltSize], payloadType, p)
	}
	b.levels = append(b.levels, level)
	for len(level) > 1 {
		next := make([][sha256.Size]byte, (len(level)+1)/2)
		for j := range next {
			if 2*j+1 < len(level) {
				next[j] = nodeHash(level[2*j][:], level[2*j+1][:])
			} else {
				next[j] = level[2*j] // no sibling: carried up as it is
			}
		}
		b.levels = append(b.levels, next)
		level = next
	}
	b.sigs = s.signatures(PAE(PayloadTypeBatch, level[0][:]))
	return b, nil
}

// Len is the number of payloads in the batch.
func (b *SignedBatch) Len() int { return len(b.payloads) }

// Envelope returns payload i's envelope: its payload, the signatures over the root
// and its proof, as encoding/json writes an Envelope.
func (b *SignedBatch) Envelope(i int) ([]byte, error) {
	if i < 0 || i >= len(b.payloads) {
		return nil, fmt.Errorf("declarations: batch has no payload %d (it has %d)", i, len(b.payloads))
	}
	if b.levels == nil {
		return b.s.encodeSigned(b.payloadType, b.payloads[i], b.sigs, nil)
	}
	// On the stack: made for each node of a fan-out, and dropped once encoded.
	var buf [MaxBatchDepth * sha256.Size]byte
	path, index := buf[:0], uint64(0)
	idx := i
	for _, level := range b.levels[:len(b.levels)-1] {
		if sib := idx ^ 1; sib < len(level) {
			if idx&1 == 1 {
				index |= 1 << (len(path) / sha256.Size)
			}
			path = append(path, level[sib][:]...)
		}
		idx >>= 1
	}
	proof := &Batch{Salt: b.salts[i*BatchSaltSize : (i+1)*BatchSaltSize], Index: index, Path: path}
	return b.s.encodeSigned(b.payloadType, b.payloads[i], b.sigs, proof)
}
