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
// its route. This check reads the pins of the moment the peer's leaf arrives, and
// routeAuth reads them again when an accepted route's CONNECT arrives. What is left
// is a route this node solicited whose handshake passed before the change and whose
// peer sends its INFO after the reload's sweep: nats-server runs no check of a
// solicited route's peer at registration.
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

// routeAuth is nats-server's authentication of an accepted route, run as the
// peer's CONNECT arrives (and again, for every accepted route, at each reload): the
// peer's leaf checked against the pins of that moment. The handshake's check alone
// left a gap the peer decides the length of: a control node that shook hands while
// still a member and sent its CONNECT after its removal was routed in, and stayed
// (an audit injected heartbeats into the control account 0.8 s after the removal
// committed, and held the route for as long as it liked).
type routeAuth struct{ pins *routePins }

// Check admits the route whose peer's leaf the current pins allow.
func (a routeAuth) Check(c server.ClientAuthentication) bool {
	cs := c.GetTLSConnectionState()
	return cs != nil && a.pins.verify(nil)(*cs) == nil
}

// routeTLS is the cluster's TLS configuration with the pin check of pins added to
// the caller's. The caller's configuration is left as it is.
func routeTLS(base *tls.Config, pins *routePins) *tls.Config {
	cfg := base.Clone()
	cfg.VerifyConnection = pins.verify(base.VerifyConnection)
	return cfg
}
