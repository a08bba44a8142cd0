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
	// maxHandshakes bounds the handshakes in progress from every source together.
	// Past it the oldest is closed: a peer's completes long before it would be the
	// oldest, unless strangers open more than this many within a handshake's time.
	maxHandshakes = 128
	// maxHandshakesPerSource bounds those from one address (an IPv6 /64). Past it
	// the new connection is closed before its handshake.
	maxHandshakesPerSource = 16
)

// handshakeGate keeps count of the handshakes in progress, by source.
type handshakeGate struct {
	mu       sync.Mutex
	bySource map[netip.Addr]int
	// pending holds the connections in handshake, oldest first; a closed one is
	// removed by leave.
	pending []*gated
}

// gated is a connection admitted to its handshake.
type gated struct {
	raw    net.Conn
	source netip.Addr
	done   bool
}

func newHandshakeGate() *handshakeGate {
	return &handshakeGate{bySource: map[netip.Addr]int{}}
}

// sourceOf is the address a connection is counted under: its IP, an IPv6 one by
// its /64, which one holder has whole.
func sourceOf(raw net.Conn) netip.Addr {
	tcp, ok := raw.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return netip.Addr{}
	}
	a := tcp.AddrPort().Addr().Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.Addr()
	}
	return a
}

// enter admits raw to its handshake, or reports that its source has too many in
// progress already (nil). It returns the connection it displaced, the oldest in
// handshake, when all sources together were at the bound; the caller closes it.
func (g *handshakeGate) enter(raw net.Conn) (in *gated, displaced net.Conn) {
	src := sourceOf(raw)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.bySource[src] >= maxHandshakesPerSource {
		return nil, nil
	}
	if len(g.pending) >= maxHandshakes {
		oldest := g.pending[0]
		g.remove(oldest)
		displaced = oldest.raw
	}
	in = &gated{raw: raw, source: src}
	g.bySource[src]++
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
