package broker

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"maps"
	"sync"
	"sync/atomic"
	"time"

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
// routeAuth reads them again when an accepted route's CONNECT arrives.
//
// Neither sees a route that passed both before a change and registers after the
// reload's sweep: nats-server registers a route when the peer's INFO arrives, which
// the peer decides, and checks nothing then. So the pins of every handshake that
// passed are remembered for routeRegisterWindow, and a change that leaves out one
// of them has the routes checked again once it has registered or been closed
// (Server.sweepLater).
type routePins struct {
	set atomic.Pointer[server.PinnedCertSet]

	mu sync.Mutex
	// passed is when a route handshake last passed with each pin, kept for
	// routeRegisterWindow.
	passed map[string]time.Time
}

// routeRegisterWindow bounds how long after its handshake's pin check a route may
// register with nats-server: the rest of the handshake, within the route TLS
// timeout, then nats-server's stale timer, which closes a route whose peer sent no
// INFO within routePingInterval × (routeMaxPingsOut+1). nats-server starts that
// timer, instead of pinging, when route compression is configured (the cluster's
// options set it for this reason): a peer answering pings could otherwise hold an
// unregistered route open for as long as it liked.
const routeRegisterWindow = routeTLSTimeout + routePingInterval*(routeMaxPingsOut+1)

// routeSweepMargin is how much later than routeRegisterWindow the routes are checked
// again: nats-server's stale timer may fire late on a loaded machine, and a route
// whose INFO arrives before it fires registers.
const routeSweepMargin = routeRegisterWindow / 2

// sweepPin is a pin no leaf has (the SHA-256 of a text, not of a key). Added to or
// taken from nats-server's pins, it makes a reload that changes nothing else check
// every registered route against them: nats-server has no other way to close a
// route.
const sweepPin = "8643e54f3ed05007e572655b1b2aea87170851e325b1d1411216a725a201a192"

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
		if len(cs.PeerCertificates) == 0 {
			if set := p.set.Load(); set == nil || *set == nil {
				return nil
			}
			return errRouteNotPinned
		}
		// As nats-server computes its pins: the SHA-256 of the leaf's
		// SubjectPublicKeyInfo, in lower-case hex.
		sum := sha256.Sum256(cs.PeerCertificates[0].RawSubjectPublicKeyInfo)
		pin := hex.EncodeToString(sum[:])
		if set := p.set.Load(); set != nil && *set != nil {
			if _, ok := (*set)[pin]; !ok {
				return errRouteNotPinned
			}
		}
		p.pass(pin, time.Now())
		return nil
	}
}

// pass records that a route handshake passed with pin at now, and forgets the
// pins no handshake passed with for routeRegisterWindow.
func (p *routePins) pass(pin string, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.passed == nil {
		p.passed = map[string]time.Time{}
	}
	maps.DeleteFunc(p.passed, func(_ string, at time.Time) bool { return now.Sub(at) > routeRegisterWindow })
	p.passed[pin] = now
}

// unlistedSince returns the last time at or after since that a route handshake
// passed with a pin set leaves out, and whether there was one. A nil set (no
// pinning) leaves out none.
func (p *routePins) unlistedSince(set server.PinnedCertSet, since time.Time) (time.Time, bool) {
	if set == nil {
		return time.Time{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var last time.Time
	for pin, at := range p.passed {
		if _, ok := set[pin]; !ok && !at.Before(since) && at.After(last) {
			last = at
		}
	}
	return last, !last.IsZero()
}

// withoutSweep is set without sweepPin: the pins SetClusterPeers was given. A nil
// set stays nil (no pinning).
func withoutSweep(set server.PinnedCertSet) server.PinnedCertSet {
	if _, ok := set[sweepPin]; !ok {
		return set
	}
	out := maps.Clone(set)
	delete(out, sweepPin)
	return out
}

// sweepToggled is set with sweepPin added, or taken out if it holds it: the same
// pins to every leaf, and a change nats-server's reload checks the routes for.
func sweepToggled(set server.PinnedCertSet) server.PinnedCertSet {
	out := maps.Clone(set)
	if _, ok := out[sweepPin]; ok {
		delete(out, sweepPin)
	} else {
		out[sweepPin] = struct{}{}
	}
	return out
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
