package broker

import (
	"crypto/sha256"
	"encoding/hex"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// RoutedTo names the brokers s has at least one route up with, for the external
// tests: route pooling makes several connections per peer, so a count of routes
// does not say which peers they reach.
func RoutedTo(s *Server) map[string]bool {
	out := map[string]bool{}
	for _, name := range s.RoutedNames() {
		out[name] = true
	}
	return out
}

// RouteSweepAfter is how long after the last route handshake that passed with a
// pin since removed the routes are checked against the pins again.
const RouteSweepAfter = routeRegisterWindow + routeSweepMargin

// RouteRegisterWindow is how long after its handshake a route may still register.
const RouteRegisterWindow = routeRegisterWindow

// TestRoutePinsRememberWhatPassed: the pins route handshakes passed with are
// remembered for routeRegisterWindow, and a set leaving one of them out is told
// when it last passed; a set listing it, or no pinning, is not.
func TestRoutePinsRememberWhatPassed(t *testing.T) {
	var p routePins
	t0 := time.Now()
	p.pass("aa", t0)
	p.pass("bb", t0.Add(time.Second))
	listed := server.PinnedCertSet{"aa": {}, "bb": {}}
	if _, ok := p.unlistedSince(listed, t0.Add(-time.Minute)); ok {
		t.Error("a set listing every pin that passed reported one left out")
	}
	if _, ok := p.unlistedSince(nil, t0.Add(-time.Minute)); ok {
		t.Error("no pinning reported a pin left out")
	}
	if last, ok := p.unlistedSince(server.PinnedCertSet{"aa": {}}, t0.Add(-time.Minute)); !ok || !last.Equal(t0.Add(time.Second)) {
		t.Errorf("bb left out: got %v, %v, want the time it passed", last, ok)
	}
	if _, ok := p.unlistedSince(server.PinnedCertSet{}, t0.Add(2*time.Second)); ok {
		t.Error("a pin that passed before since was reported")
	}
	p.pass("cc", t0.Add(routeRegisterWindow+2*time.Second))
	if _, ok := p.passed["aa"]; ok {
		t.Error("a pin no handshake passed with for the window is still remembered")
	}
}

// TestSweepPinChangesNothingButTheSet: toggling sweepPin gives a set nats-server's
// reload sees as changed, with the same pins for every leaf, and withoutSweep gives
// back what SetClusterPeers set; nil (no pinning) stays nil.
func TestSweepPinChangesNothingButTheSet(t *testing.T) {
	set := server.PinnedCertSet{"aa": {}, "bb": {}}
	once := sweepToggled(set)
	if reflect.DeepEqual(once, set) {
		t.Fatal("toggled set equals the set: the reload would check no route")
	}
	if _, ok := set[sweepPin]; ok {
		t.Fatal("toggling changed the caller's set")
	}
	for pin := range set {
		if _, ok := once[pin]; !ok {
			t.Errorf("toggling dropped pin %s", pin)
		}
	}
	if twice := sweepToggled(once); !reflect.DeepEqual(twice, set) {
		t.Errorf("toggled twice: %v, want %v", twice, set)
	}
	if got := withoutSweep(once); !reflect.DeepEqual(got, set) {
		t.Errorf("withoutSweep: %v, want %v", got, set)
	}
	if withoutSweep(nil) != nil {
		t.Error("withoutSweep(nil) is not nil: no pinning became pinning nothing")
	}
	if empty := withoutSweep(sweepToggled(server.PinnedCertSet{})); empty == nil || len(empty) != 0 {
		t.Errorf("an empty set came back as %#v", empty)
	}
	sum := sha256.Sum256([]byte("mesh broker: a route pin no certificate has"))
	if hex.EncodeToString(sum[:]) != sweepPin {
		t.Error("sweepPin is not the hash of its text")
	}
}

// HoldReload makes s's hook answer as during a reload of its own until release,
// with no reload running: every question it gets meanwhile is a CONNECT's.
func HoldReload(s *Server) (release func()) {
	s.hook.reloads.Add(1)
	return func() { s.hook.reloads.Add(-1) }
}
