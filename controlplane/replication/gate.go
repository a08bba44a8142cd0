package replication

import (
	"net"
	"net/netip"
	"sync"
)

// Bounds on the TLS handshakes in progress on the Raft port. Anyone who reaches the
// port can open a connection, and each one holds a descriptor and a goroutine until
// its handshake ends or times out (HandshakeTimeout): a stranger opening idle
// sockets took every descriptor of serve in an audit, and Raft's own redials to
// peers then failed ("too many open files") for as long as it lasted. A peer's
// handshake takes milliseconds and a control node opens a few at a time.
const (
	// maxHandshakes bounds the handshakes in progress from strangers' addresses
	// together. Past it the oldest of theirs is closed: strangers opening
	// connections faster than a handshake takes pushed every handshake out,
	// a peer's too, so a peer's address (learnPeer) is never picked.
	maxHandshakes = 128
	// maxHandshakesPerSource bounds those from one address (an IPv6 /64). Past it
	// the new connection is closed before its handshake.
	maxHandshakesPerSource = 16
	// maxPeerHandshakesPerSource is that bound for a peer's address, and
	// maxPeerSources how many addresses are known as peers'.
	maxPeerHandshakesPerSource = 64
	maxPeerSources             = 64
)

// handshakeGate keeps count of the handshakes in progress, by source.
type handshakeGate struct {
	mu       sync.Mutex
	bySource map[netip.Addr]int
	// peers are the addresses of the members (learnPeer): their handshakes are
	// never the ones closed to make room.
	peers map[netip.Addr]bool
	// pending holds the connections in handshake, oldest first; a closed one is
	// removed by leave.
	pending []*gated
	// strangers counts the pending ones from addresses not in peers.
	strangers int
}

// gated is a connection admitted to its handshake.
type gated struct {
	raw    net.Conn
	source netip.Addr
	peer   bool // from a peer's address when it entered
	done   bool
}

func newHandshakeGate() *handshakeGate {
	return &handshakeGate{bySource: map[netip.Addr]int{}, peers: map[netip.Addr]bool{}}
}

// learnPeer records a as a member's address: one this node dials, one in its Raft
// configuration, one whose handshake presented an allowed certificate.
func (g *handshakeGate) learnPeer(a netip.Addr) {
	if !a.IsValid() {
		return
	}
	a = sourceKey(a)
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.peers) < maxPeerSources {
		g.peers[a] = true
	}
}

// sourceOf is the address a connection is counted under: its IP, an IPv6 one by
// its /64, which one holder has whole.
func sourceOf(raw net.Conn) netip.Addr {
	tcp, ok := raw.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return netip.Addr{}
	}
	return sourceKey(tcp.AddrPort().Addr())
}

// sourceKey is the address a is counted under: itself, or an IPv6 one's /64.
func sourceKey(a netip.Addr) netip.Addr {
	a = a.Unmap()
	if a.Is6() {
		p, _ := a.WithZone("").Prefix(64)
		return p.Addr()
	}
	return a
}

// enter admits raw to its handshake, or reports that its source has too many in
// progress already (nil). It returns the connection it displaced, the oldest from a
// stranger's address, when strangers were at the bound; the caller closes it.
func (g *handshakeGate) enter(raw net.Conn) (in *gated, displaced net.Conn) {
	src := sourceOf(raw)
	g.mu.Lock()
	defer g.mu.Unlock()
	peer := g.peers[src]
	limit := maxHandshakesPerSource
	if peer {
		limit = maxPeerHandshakesPerSource
	}
	if g.bySource[src] >= limit {
		return nil, nil
	}
	if !peer && g.strangers >= maxHandshakes {
		for _, p := range g.pending {
			if !p.peer {
				g.remove(p)
				displaced = p.raw
				break
			}
		}
	}
	in = &gated{raw: raw, source: src, peer: peer}
	g.bySource[src]++
	if !peer {
		g.strangers++
	}
	g.pending = append(g.pending, in)
	return in, displaced
}

// leave counts in's handshake as over, whatever its end.
func (g *handshakeGate) leave(in *gated) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.remove(in)
}

// remove forgets in, once; g.mu is held.
func (g *handshakeGate) remove(in *gated) {
	if in.done {
		return
	}
	in.done = true
	if g.bySource[in.source]--; g.bySource[in.source] <= 0 {
		delete(g.bySource, in.source)
	}
	if !in.peer {
		g.strangers--
	}
	for i, p := range g.pending {
		if p == in {
			g.pending = append(g.pending[:i], g.pending[i+1:]...)
			break
		}
	}
}

// inProgress returns how many handshakes are counted.
func (g *handshakeGate) inProgress() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.pending)
}
