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
	envelope []byte
}

// maxCachedEnvelopes bounds the envelopes the signer keeps: about a kilobyte each,
// so that a fleet's memory does not hold one per node.
const maxCachedEnvelopes = 4096

func newSigner(keys []ed25519.PrivateKey) *signer {
	s := &signer{cache: map[string]signed{}, bodies: map[string]declarations.EncodedBody{}}
	s.setKeys(keys)
	return s
}

// setKeys replaces the signing keys; envelopes signed before are forgotten.
func (s *signer) setKeys(keys []ed25519.PrivateKey) {
	s.mu.Lock()
	s.keys = slices.Clone(keys)
	s.sign, s.signErr = declarations.NewSigner(keys...)
	clear(s.cache)
	s.members = signedMembership{}
	s.mu.Unlock()
}

// currentKeys returns the signing keys.
func (s *signer) currentKeys() []ed25519.PrivateKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.keys)
}

// declaration returns the signed declaration in describes. It holds no lock of the
// state (in is a copy) and may be called from several goroutines at once: the
// signing itself runs outside the signer's lock.
func (s *signer) declaration(in state.DeclarationInput) ([]byte, error) {
	dcl := in.Declared
	s.mu.Lock()
	if c, ok := s.cache[in.Node]; ok && c.version == dcl.Version && c.issuedAt.Equal(dcl.IssuedAt) &&
		c.epoch == in.KeyringEpoch && c.digest == dcl.BodyDigest && c.nodeKey == in.NodeKey {
		s.mu.Unlock()
		return c.envelope, nil
	}
	body, ok := s.bodies[dcl.BodyDigest]
	sign, signErr := s.sign, s.signErr
	s.mu.Unlock()
	if signErr != nil {
		return nil, fmt.Errorf("sign declaration v%d for %s: %w", dcl.Version, in.Node, signErr)
	}
	if !ok {
		if in.Body == nil {
			return nil, fmt.Errorf("declared body %s of node %s is missing from the state", dcl.BodyDigest, in.Node)
		}
		parsed, err := declarations.ParseBody(in.Body)
		if err == nil {
			body, err = declarations.EncodeBody(parsed)
		}
		if err != nil {
			return nil, fmt.Errorf("declared body of node %s: %w", in.Node, err)
		}
		s.mu.Lock()
		if len(s.bodies) > 1024 {
			clear(s.bodies)
		}
		s.bodies[dcl.BodyDigest] = body
		s.mu.Unlock()
	}
	env, err := sign.Declaration(declarations.Declaration{
		Mesh:         in.Mesh,
		Node:         in.Node,
		NodeKey:      in.NodeKey,
		Version:      dcl.Version,
		KeyringEpoch: in.KeyringEpoch,
		IssuedAt:     dcl.IssuedAt,
		ExpiresAt:    dcl.ExpiresAt,
	}, body)
	if err != nil {
		return nil, fmt.Errorf("sign declaration v%d for %s: %w", dcl.Version, in.Node, err)
	}
	s.mu.Lock()
	if len(s.cache) >= maxCachedEnvelopes {
		// Evict one at random (Go's map order): the cache spares re-signing for
		// nodes that ask again soon (a reconnect, a laggard), not for the fleet.
		for k := range s.cache {
			delete(s.cache, k)
			break
		}
	}
	s.cache[in.Node] = signed{version: dcl.Version, issuedAt: dcl.IssuedAt, epoch: in.KeyringEpoch, digest: dcl.BodyDigest, nodeKey: in.NodeKey, envelope: env}
	s.mu.Unlock()
	return env, nil
}

// cached returns how many envelopes the signer keeps.
func (s *signer) cached() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.cache)
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
		delete(s.cache, node)
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
