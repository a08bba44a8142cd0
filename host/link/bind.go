package link

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"mesh/host/framing"
)

// Channel binding (docs/decisions/0018). The node key signs, in place of the
// server's bare nonce, the nonce joined to a value that both ends of this one TLS
// session export (RFC 9266's tls-exporter). Anything holding a leaf of the mesh CA
// passes the pin check: a removed control node, say. On the host's path, it could
// end the host's session, open its own to a real broker, hand the host that
// broker's nonce and log in as the host with the signature it gets back. The two
// sessions export different values, so the mesh refuses that signature. The control
// plane defines the same binding on its side (broker.BoundNonce); golden vectors
// hold the two together.

// BindingLabel is the TLS exporter label of the channel binding.
const BindingLabel = "EXPORTER-mesh-channel-binding"

// BindingSize is the length of the exported value.
const BindingSize = 32

// boundPrefix separates a bound nonce from anything else the node key signs.
const boundPrefix = "mesh bound nonce v1\x00"

// ErrNoBinding means the session exports no channel binding (not TLS 1.3), so the
// node key signs nothing over it.
var ErrNoBinding = errors.New("the TLS session exports no channel binding; refusing to sign the broker's nonce")

// BoundNonce is what the node key signs to log in over a session whose binding is
// given: a fixed prefix, the binding, then the server's nonce.
func BoundNonce(nonce, binding []byte) []byte {
	m := make([]byte, 0, len(boundPrefix)+len(binding)+len(nonce))
	m = append(m, boundPrefix...)
	m = append(m, binding...)
	return append(m, nonce...)
}

// binding returns the value both ends of the session export.
func binding(c *tls.Conn) ([]byte, error) {
	cs := c.ConnectionState()
	b, err := cs.ExportKeyingMaterial(BindingLabel, nil, BindingSize)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoBinding, err)
	}
	return b, nil
}

// boundDialer makes a connection's TLS session itself, handshake first and pinned,
// so that the node key's signature can be bound to it; nats.go is told to skip its
// own handshake. One boundDialer serves one nats.Conn: it remembers the session it
// made last, the one nats.go logs in over next.
type boundDialer struct {
	ctx     context.Context // nil: none
	tls     *tls.Config
	tcp     *net.Dialer
	timeout time.Duration
	// refused hears of each broker the pin check refuses (Login.Refused).
	refused func(error)

	mu   sync.Mutex
	last *tls.Conn
}

// Dial connects and completes the pinned TLS handshake.
func (d *boundDialer) Dial(network, address string) (net.Conn, error) {
	parent := d.ctx
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithTimeout(parent, d.timeout)
	defer cancel()
	raw, err := d.tcp.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	c := tls.Client(raw, d.tls)
	if err := c.HandshakeContext(ctx); err != nil {
		raw.Close()
		if d.refused != nil && (IsSubstituted(err) || IsClock(err)) {
			// Told here, where the address is known: nats.go reports a
			// reconnection's failure to no handler.
			d.refused(&BrokerError{Broker: address, Err: err})
		}
		if errors.Is(err, context.DeadlineExceeded) {
			// The connection opened, so the address answers: what stalls is the
			// broker, or its certificates (the handshake's large packets) on the way.
			return nil, fmt.Errorf("tls handshake: no answer within %s of the TCP connection opening: "+
				"the broker is overloaded, or large packets are lost on the path (an MTU smaller than announced, ICMP filtered): %w", d.timeout, err)
		}
		return nil, fmt.Errorf("tls handshake: %w", err)
	}
	d.mu.Lock()
	d.last = c
	d.mu.Unlock()
	// nats.go reads through the guard: it trusts the sizes a broker announces.
	return framing.Guard(c), nil
}

// SkipTLSHandshake tells nats.go that Dial made the TLS session already.
func (d *boundDialer) SkipTLSHandshake() bool { return true }

// sign returns nats.go's nonce callback: sign applied to the nonce bound to the
// session Dial made last.
func (d *boundDialer) sign(sign func([]byte) ([]byte, error)) func([]byte) ([]byte, error) {
	return func(nonce []byte) ([]byte, error) {
		d.mu.Lock()
		c := d.last
		d.mu.Unlock()
		if c == nil {
			return nil, ErrNoBinding
		}
		b, err := binding(c)
		if err != nil {
			return nil, err
		}
		return sign(BoundNonce(nonce, b))
	}
}
