package broker

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

// Channel binding (docs/decisions/0018). A client that logs in with a key signs, in
// place of the server's bare nonce, the nonce joined to a value that both ends of its
// one TLS session export (RFC 9266's tls-exporter). Anything that holds a leaf of the
// mesh CA passes a client's pin check: a removed control node, say. Placed on the
// client's path, it could terminate the client's session, open its own to a real
// broker, hand the client that broker's nonce and log in with the signature it gets
// back. The two sessions export different values, so a bound signature is refused
// there. The host agent defines the same binding on its side (host/link); golden
// vectors hold the two together.

// BindingLabel is the TLS exporter label of the channel binding.
const BindingLabel = "EXPORTER-mesh-channel-binding"

// BindingSize is the length of the exported value.
const BindingSize = 32

// boundPrefix separates a bound nonce from anything else a key signs.
const boundPrefix = "mesh bound nonce v1\x00"

// ErrNoBinding means a connection exports no channel binding: it is not TLS 1.3 (or
// 1.2 with extended master secret), so a signature cannot be bound to it.
var ErrNoBinding = errors.New("the connection exports no TLS channel binding")

// ChannelBinding returns the value both ends of a TLS session export for the binding,
// or nil when cs is nil or exports nothing.
func ChannelBinding(cs *tls.ConnectionState) []byte {
	if cs == nil {
		return nil
	}
	b, err := cs.ExportKeyingMaterial(BindingLabel, nil, BindingSize)
	if err != nil {
		return nil
	}
	return b
}

// BoundNonce is what a client signs to log in over a session whose binding is given:
// a fixed prefix, the binding, then the server's nonce.
func BoundNonce(nonce, binding []byte) []byte {
	m := make([]byte, 0, len(boundPrefix)+len(binding)+len(nonce))
	m = append(m, boundPrefix...)
	m = append(m, binding...)
	return append(m, nonce...)
}

// BoundDialer is a control-plane client's dialer (meshctl, join): it makes the TLS
// session itself, handshake first, so that the client's signature can be bound to
// it. Give it to nats.go with nats.SetCustomDialer and nats.TLSHandshakeFirst, and
// sign the nonce with Sign. One BoundDialer serves one nats.Conn: it remembers the
// session it made last, the one nats.go logs in over next.
type BoundDialer struct {
	// TLS is the client configuration (the pin check included).
	TLS *tls.Config
	// Timeout bounds the TCP connect and the TLS handshake; zero means 10 s.
	Timeout time.Duration
	// Context, when set, gives a dial up and closes a connection once it is done.
	Context context.Context

	mu   sync.Mutex
	last *tls.Conn
}

// Dial connects and completes the TLS handshake.
func (d *BoundDialer) Dial(network, address string) (net.Conn, error) {
	ctx := d.Context
	if ctx == nil {
		ctx = context.Background()
	}
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	hctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	raw, err := (&net.Dialer{}).DialContext(hctx, network, address)
	if err != nil {
		return nil, err
	}
	c := tls.Client(raw, d.TLS)
	if err := c.HandshakeContext(hctx); err != nil {
		raw.Close()
		return nil, fmt.Errorf("%w: %w", ErrHandshake, err)
	}
	if d.Context != nil {
		context.AfterFunc(d.Context, func() { c.Close() })
	}
	d.mu.Lock()
	d.last = c
	d.mu.Unlock()
	// nats.go reads through the guard: it trusts the sizes a broker announces, and
	// a leaf of the mesh CA is all a broker needs to pass the pin.
	return framing.Guard(c), nil
}

// ErrHandshake wraps what stopped a TLS handshake BoundDialer began once the broker
// had taken the connection: a broker that is busy (a timeout), or one that is not
// the mesh (a pin or certificate error).
var ErrHandshake = errors.New("tls handshake")

// SkipTLSHandshake tells nats.go that Dial made the TLS session already.
func (d *BoundDialer) SkipTLSHandshake() bool { return true }

// Sign returns nats.go's signature callback: sign (the client key's) applied to the
// server's nonce bound to the session Dial made last.
func (d *BoundDialer) Sign(sign func([]byte) ([]byte, error)) func([]byte) ([]byte, error) {
	return func(nonce []byte) ([]byte, error) {
		d.mu.Lock()
		c := d.last
		d.mu.Unlock()
		if c == nil {
			return nil, ErrNoBinding
		}
		cs := c.ConnectionState()
		b := ChannelBinding(&cs)
		if b == nil {
			return nil, ErrNoBinding
		}
		return sign(BoundNonce(nonce, b))
	}
}
