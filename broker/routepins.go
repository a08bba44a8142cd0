package broker

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"sync/atomic"

	"github.com/nats-io/nats-server/v2/server"
)

// errRouteNotPinned refuses, inside the handshake, a route whose peer presents a
// leaf the cluster pins leave out.
var errRouteNotPinned = errors.New("broker: the route's peer presents a leaf the cluster pins leave out (a control node no longer in the mesh?)")

// routePins is the set of leaves a route may present now, as SetClusterPeers last
// set it, checked inside every route handshake in both directions.
//
// nats-server checks its own copy of the pins (Cluster.TLSPinnedCerts) against the
// options it read when the route connection began, before dialling, and a reload
// closes only the routes already registered. A route this node was soliciting
// while the pins dropped its peer, or one whose handshake was under way, finished
// with the old pins and stayed up with no later check: a removed control node kept
// its route. This check reads the pins of the moment the peer's leaf arrives. What
// is left is a handshake that passed it before the change and registers its route
// after the reload's sweep: the time of one round trip on the route, against the
// whole reload.
type routePins struct {
	set atomic.Pointer[server.PinnedCertSet]
}

// store makes set the pins every later route handshake is checked against (nil:
// every leaf of the mesh CA).
func (p *routePins) store(set server.PinnedCertSet) { p.set.Store(&set) }

// verify is the pin check of a route handshake, after the chain check of base.
func (p *routePins) verify(base func(tls.ConnectionState) error) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if base != nil {
			if err := base(cs); err != nil {
				return err
			}
		}
		set := p.set.Load()
		if set == nil || *set == nil {
			return nil
		}
		if len(cs.PeerCertificates) == 0 {
			return errRouteNotPinned
		}
		// As nats-server computes its pins: the SHA-256 of the leaf's
		// SubjectPublicKeyInfo, in lower-case hex.
		sum := sha256.Sum256(cs.PeerCertificates[0].RawSubjectPublicKeyInfo)
		if _, ok := (*set)[hex.EncodeToString(sum[:])]; !ok {
			return errRouteNotPinned
		}
		return nil
	}
}

// routeTLS is the cluster's TLS configuration with the pin check of pins added to
// the caller's. The caller's configuration is left as it is.
func routeTLS(base *tls.Config, pins *routePins) *tls.Config {
	cfg := base.Clone()
	cfg.VerifyConnection = pins.verify(base.VerifyConnection)
	return cfg
}
