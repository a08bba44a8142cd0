package daemon

import (
	"crypto/ed25519"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"mesh/controlplane/state"
	"mesh/declarations"
)

// signer turns a node's declared state into its signed envelope, and remembers the
// result: hosts ask again on every reconnect, and a leader re-sends to laggards, so
// the same envelope is wanted many times.
type signer struct {
	mu sync.Mutex
	// keys are the private keys of the current keyring this node holds, in keyring
	// order: during a rotation every declaration carries a signature by each, so
	// hosts on the old keyring and on the new one both verify it.
	keys []ed25519.PrivateKey
	// sign signs with keys; it is nil when they cannot sign, and signErr says why.
	sign    *declarations.Signer
	signErr error
	cache   map[string]signed                   // by node
	bodies  map[string]declarations.EncodedBody // parsed and encoded bodies by digest
	// cacheBytes and bodyBytes are the sizes of the envelopes in cache and the
	// bodies in bodies: each envelope carries its whole body, so a count alone
	// bounded nothing (4,096 envelopes of a 256 KiB body held 1.4 GiB: a review).
	cacheBytes, bodyBytes int
	// refused are the bodies by digest this version's rules refuse to sign, and
	// why: declared by an older meshctl whose rules took them (a path element
	// starting with '-', an invisible character).
	refused map[string]error
	// verdicts say, by body digest, whether this version's rules sign the body
	// (nil) or why not: a few dozen bytes each, kept apart from bodies and refused,
	// which a fleet declared a body per node clears over and over, so that the
	// roster and the metrics judge each body once, not on every page.
	verdicts map[string]error
	// members is the membership last signed, by version and keyring epoch.
	members signedMembership
}

type signedMembership struct {
	version, epoch uint64
	envelope       []byte
}

type signed struct {
	version  uint64
	issuedAt time.Time
	epoch    uint64
	digest   string
	nodeKey  string
	// batched: the envelope carries a batch proof, which an agent that does not
	// take them refuses as malformed.
	batched  bool
	envelope []byte
}

// maxCachedEnvelopes and maxCachedEnvelopeBytes bound the envelopes the signer
// keeps, so that a fleet's memory does not hold one per node: a kilobyte or so each
// for a small body, and as large as the body for a large one (to about 1 MiB).
const (
	maxCachedEnvelopes     = 4096
	maxCachedEnvelopeBytes = 32 << 20
)

// maxBodies and maxBodyBytes bound the parsed bodies the signer keeps beside the
// state's; the sweep also drops those the state no longer holds (keepBodies).
const (
	maxBodies    = 1024
	maxBodyBytes = 32 << 20
)

func newSigner(keys []ed25519.PrivateKey) *signer {
	s := &signer{cache: map[string]signed{}, bodies: map[string]declarations.EncodedBody{}, refused: map[string]error{}, verdicts: map[string]error{}}
	s.setKeys(keys)
	return s
}

// setKeys replaces the signing keys; envelopes signed before are forgotten.
func (s *signer) setKeys(keys []ed25519.PrivateKey) {
	s.mu.Lock()
	s.keys = slices.Clone(keys)
	s.sign, s.signErr = declarations.NewSigner(keys...)
	clear(s.cache)
	s.cacheBytes = 0
	s.members = signedMembership{}
	s.mu.Unlock()
}

// currentKeys returns the signing keys.
func (s *signer) currentKeys() []ed25519.PrivateKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.keys)
}

// declaration returns the signed declaration in describes, signed on its own. It
// holds no lock of the state (in is a copy) and may be called from several
// goroutines at once: the signing itself runs outside the signer's lock.
func (s *signer) declaration(in state.DeclarationInput) ([]byte, error) {
	if env, ok := s.kept(in); ok {
		return env, nil
	}
	sign, body, err := s.prepare(in)
	if err != nil {
		return nil, err
	}
	env, err := sign.Declaration(declarationOf(in), body)
	if err != nil {
		return nil, fmt.Errorf("sign declaration v%d for %s: %w", in.Declared.Version, in.Node, err)
	}
	s.keep(in, env, false)
	return env, nil
}

// kept returns the envelope kept for in's node if it is in's declaration and one
// the node can take: an envelope from a batch only for an agent that takes batch
// proofs (a node downgraded since asks without them).
func (s *signer) kept(in state.DeclarationInput) ([]byte, bool) {
	dcl := in.Declared
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.cache[in.Node]; ok && c.version == dcl.Version && c.issuedAt.Equal(dcl.IssuedAt) &&
		c.epoch == in.KeyringEpoch && c.digest == dcl.BodyDigest && c.nodeKey == in.NodeKey && (!c.batched || in.BatchProofs) {
		return c.envelope, true
	}
	return nil, false
}

// prepare returns what signs in's declaration and its body, encoded (once per body,
// not per node).
func (s *signer) prepare(in state.DeclarationInput) (*declarations.Signer, declarations.EncodedBody, error) {
	dcl := in.Declared
	s.mu.Lock()
	sign, signErr := s.sign, s.signErr
	s.mu.Unlock()
	if signErr != nil {
		return nil, declarations.EncodedBody{}, fmt.Errorf("sign declaration v%d for %s: %w", dcl.Version, in.Node, signErr)
	}
	if in.Body == nil {
		s.mu.Lock()
		body, ok := s.bodies[dcl.BodyDigest]
		s.mu.Unlock()
		if ok {
			return sign, body, nil
		}
		return nil, body, fmt.Errorf("declared body %s of node %s is missing from the state", dcl.BodyDigest, in.Node)
	}
	body, err := s.encoded(dcl.BodyDigest, in.Body)
	if err != nil {
		return nil, body, fmt.Errorf("declared body of node %s: %w", in.Node, err)
	}
	return sign, body, nil
}

// encoded is the body of digest, raw as the state holds it, parsed and encoded by
// this version's rules once (not per node), or why those rules refuse it.
func (s *signer) encoded(digest string, raw []byte) (declarations.EncodedBody, error) {
	s.mu.Lock()
	body, ok := s.bodies[digest]
	refused := s.refused[digest]
	if ok || refused != nil {
		// Judged before: the verdict kept too, which a clearing of verdicts alone
		// (past maxVerdicts) lost while the body stayed here, and an unsignable
		// body then showed converged (a review's run).
		s.keepVerdict(digest, refused)
		s.mu.Unlock()
		return body, refused
	}
	s.mu.Unlock()
	parsed, err := declarations.ParseBody(raw)
	if err == nil {
		body, err = declarations.EncodeBody(parsed)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.bodies)+len(s.refused) > maxBodies {
		clear(s.bodies)
		clear(s.refused)
		s.bodyBytes = 0
	}
	// Over the bytes, bodies go at random until this one fits: cleared whole, a
	// fleet of a few hundred large bodies re-parsed one for nearly every node (a
	// review).
	for s.bodyBytes+body.Len() > maxBodyBytes && len(s.bodies) > 0 {
		for d, b := range s.bodies {
			s.bodyBytes -= b.Len()
			delete(s.bodies, d)
			break
		}
	}
	if err != nil {
		s.refused[digest] = err
	} else if old, ok := s.bodies[digest]; !ok || old.Len() != body.Len() {
		// (Encoded by another caller meanwhile: the same body, counted once.)
		s.bodyBytes += body.Len() - old.Len()
		s.bodies[digest] = body
	}
	s.keepVerdict(digest, err)
	return body, err
}

// keepVerdict records refused as digest's verdict (s.mu held), clearing the
// verdicts first when they are maxVerdicts.
func (s *signer) keepVerdict(digest string, refused error) {
	if _, known := s.verdicts[digest]; known {
		return
	}
	if len(s.verdicts) >= maxVerdicts {
		clear(s.verdicts)
	}
	s.verdicts[digest] = refused
}

// maxVerdicts bounds signer.verdicts: a 64-byte digest and an error value each,
// about 6 MB at most, the bodies of a fleet of 65,536 declared one each.
const maxVerdicts = 1 << 16

// verdict says whether the body of digest is known to this signer (encoded judged
// it), and if so why this version's rules refuse to sign it (nil: they sign it).
// It parses nothing, so it may be asked under the state's lock.
func (s *signer) verdict(digest string) (refused error, known bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	refused, known = s.verdicts[digest]
	return refused, known
}

// signable judges each body of bodies (by digest) this signer has not judged yet,
// parsing it: called outside the state's lock with bodies the state holds, which it
// never changes in place, so that verdict knows them all after.
func (s *signer) signable(bodies map[string][]byte) {
	for digest, raw := range bodies {
		if _, known := s.verdict(digest); !known {
			s.encoded(digest, raw)
		}
	}
}

// keep remembers env as in's node's envelope.
func (s *signer) keep(in state.DeclarationInput, env []byte, batched bool) {
	dcl := in.Declared
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.cache[in.Node]; ok {
		s.cacheBytes -= len(old.envelope)
		delete(s.cache, in.Node)
	}
	if len(env) > maxCachedEnvelopeBytes {
		return
	}
	// Evict at random (Go's map order) until it fits: the cache spares re-signing
	// for nodes that ask again soon (a reconnect, a laggard), not for the fleet.
	for len(s.cache) >= maxCachedEnvelopes || s.cacheBytes+len(env) > maxCachedEnvelopeBytes {
		for k, c := range s.cache {
			s.cacheBytes -= len(c.envelope)
			delete(s.cache, k)
			break
		}
	}
	s.cache[in.Node] = signed{version: dcl.Version, issuedAt: dcl.IssuedAt, epoch: in.KeyringEpoch, digest: dcl.BodyDigest,
		nodeKey: in.NodeKey, batched: batched, envelope: env}
	s.cacheBytes += len(env)
}

// declarationOf is the declaration in describes, without its body.
func declarationOf(in state.DeclarationInput) declarations.Declaration {
	return declarations.Declaration{
		Mesh:         in.Mesh,
		Node:         in.Node,
		NodeKey:      in.NodeKey,
		Version:      in.Declared.Version,
		KeyringEpoch: in.KeyringEpoch,
		IssuedAt:     in.Declared.IssuedAt,
		ExpiresAt:    in.Declared.ExpiresAt,
	}
}

// batch signs the declarations ins describe as one batch (decision 0034): one
// signature per signing key for them all, where declaration signs one per node.
// A node whose declaration cannot be signed (its body missing or refused) is left
// out of the batch, with its error; the envelopes are made, and kept, by
// signedBatch.envelope, from several goroutines at once if need be.
func (s *signer) batch(ins []state.DeclarationInput) *signedBatch {
	b := &signedBatch{s: s, ins: ins, at: make([]int, len(ins)), errs: make([]error, len(ins))}
	payloads := make([][]byte, 0, len(ins))
	// The payloads, one after the other in one buffer, sized after the first:
	// a fleet's differ by their ids and version only.
	var arena []byte
	var sign *declarations.Signer
	for i, in := range ins {
		b.at[i] = -1
		sg, body, err := s.prepare(in)
		if err == nil {
			start := len(arena)
			var grown []byte
			// On an error the buffer stays as it was (the payload appended returns
			// nil then), and the payloads of the others with it.
			if grown, err = declarations.AppendDeclarationPayload(arena, declarationOf(in), body); err == nil {
				arena = grown
				if len(payloads) == 0 {
					arena = slices.Grow(arena, (len(arena)+64)*(len(ins)-1-i))
				}
				b.at[i], sign = len(payloads), sg
				payloads = append(payloads, arena[start:len(arena):len(arena)])
				continue
			}
			err = fmt.Errorf("sign declaration v%d for %s: %w", in.Declared.Version, in.Node, err)
		}
		b.errs[i] = err
	}
	if len(payloads) == 0 {
		return b
	}
	signed, err := sign.SignBatch(declarations.PayloadTypeDeclaration, payloads)
	if err != nil {
		for i := range ins {
			if b.at[i] >= 0 {
				b.at[i], b.errs[i] = -1, fmt.Errorf("sign declaration v%d for %s: %w", ins[i].Declared.Version, ins[i].Node, err)
			}
		}
		return b
	}
	b.signed = signed
	return b
}

// signedBatch is a batch of nodes' declarations, signed.
type signedBatch struct {
	s      *signer
	ins    []state.DeclarationInput
	at     []int   // each input's place in signed; -1: not signed, errs says why
	errs   []error // why an input was not signed
	signed *declarations.SignedBatch
}

// envelope returns input i's envelope, and keeps it for its node.
func (b *signedBatch) envelope(i int) ([]byte, error) {
	if b.at[i] < 0 {
		return nil, b.errs[i]
	}
	env, err := b.signed.Envelope(b.at[i])
	if err != nil {
		return nil, fmt.Errorf("sign declaration v%d for %s: %w", b.ins[i].Declared.Version, b.ins[i].Node, err)
	}
	b.s.keep(b.ins[i], env, b.signed.Len() > 1)
	return env, nil
}

// held returns how many envelopes and parsed bodies the signer keeps, and their
// sizes in bytes.
func (s *signer) held() (envelopes, envelopeBytes, bodies, bodyBytes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.cache), s.cacheBytes, len(s.bodies) + len(s.refused), s.bodyBytes
}

// bodyDigests returns the digests of the bodies the signer keeps, parsed or refused.
func (s *signer) bodyDigests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append(slices.Collect(maps.Keys(s.bodies)), slices.Collect(maps.Keys(s.refused))...)
}

// dropBodies forgets the bodies of digests (the state holds them no more): the
// signer's copies stayed until a thousand others came, and with large bodies
// that was hundreds of MiB on every control node (a review).
func (s *signer) dropBodies(digests []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range digests {
		if b, ok := s.bodies[d]; ok {
			s.bodyBytes -= b.Len()
			delete(s.bodies, d)
		}
		delete(s.refused, d)
	}
}

// nodes returns the nodes whose envelopes the signer keeps.
func (s *signer) nodes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Keys(s.cache))
}

// forget drops the envelopes kept for nodes.
func (s *signer) forget(nodes []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, node := range nodes {
		if c, ok := s.cache[node]; ok {
			s.cacheBytes -= len(c.envelope)
			delete(s.cache, node)
		}
	}
}

// revocation signs the notice that tells the node enrolled with key that it was
// revoked.
func (s *signer) revocation(mesh, node, key string, at time.Time) ([]byte, error) {
	return declarations.SignRevocation(declarations.Revocation{Mesh: mesh, Node: node, NodeKey: key, RevokedAt: at}, s.currentKeys()...)
}

// membership returns the signed list of brokers in describes, signed once per
// version and keyring epoch: every node receives the same bytes.
func (s *signer) membership(in state.MembershipInput, at time.Time) ([]byte, error) {
	s.mu.Lock()
	if m := s.members; m.envelope != nil && m.version == in.Version && m.epoch == in.KeyringEpoch {
		s.mu.Unlock()
		return m.envelope, nil
	}
	keys := s.keys
	s.mu.Unlock()
	env, err := declarations.SignMembership(declarations.Membership{Mesh: in.Mesh, Version: in.Version, Brokers: in.Brokers, IssuedAt: at}, keys...)
	if err != nil {
		return nil, fmt.Errorf("sign membership v%d: %w", in.Version, err)
	}
	s.mu.Lock()
	s.members = signedMembership{version: in.Version, epoch: in.KeyringEpoch, envelope: env}
	s.mu.Unlock()
	return env, nil
}
