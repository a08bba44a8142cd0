// Package link is the host's connection to the mesh: the NATS options every
// connection a host opens shares, the one-shot ones of enrolment and the long-lived
// one of the run loop alike. Every connection is TLS with the handshake first (no
// byte of NATS in clear) and checks the broker's chain against the pinned CA inside
// the handshake, before any credential crosses.
package link

import (
	"context"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/host/identity"
	"mesh/host/pintls"
)

// Login is how a connection logs in with a node key: the broker's chain must reach
// the pinned CA, and the key signs the server's nonce bound to that TLS session.
type Login struct {
	// Pin is the SHA-256 of the mesh CA's SubjectPublicKeyInfo.
	Pin [32]byte
	// PublicKey is the node key (nkey text); Sign signs with its private half.
	PublicKey string
	Sign      func([]byte) ([]byte, error)
	// Refused, when not nil, hears of every broker the pin check refuses. nats.go
	// returns that error from a first connection but reports a failed
	// reconnection's handshake to no handler, so a long-lived connection learns of
	// a substituted broker only here.
	Refused func(error)
	// Context, when not nil, ends the dials under way when it ends: a stopping
	// agent does not wait out a broker that holds its handshake.
	Context context.Context
	// Timeout bounds the TCP connect and the TLS handshake of one dial; zero means
	// DialTimeout.
	Timeout time.Duration
	// Now is the clock the broker's certificate is checked by; nil means time.Now.
	Now func() time.Time
}

// Options returns the nats.go options of the login. Every connection dials with
// Dialer's settings, so that the kernel watches the long-lived ones (Liveness).
func (l Login) Options() []nats.Option {
	cfg := pintls.Config(l.Pin, l.Now)
	timeout := l.Timeout
	if timeout <= 0 {
		timeout = DialTimeout
	}
	d := &boundDialer{ctx: l.Context, tls: cfg, tcp: Dialer(), timeout: timeout, refused: l.Refused}
	// The brokers a host dials are those of its token, its identity and the signed
	// membership (the agent sets its pool from it): addresses a broker's INFO lists
	// are signed by nobody, and a relay holding a leaf of the mesh CA (decision
	// 0018) could list its own there.
	return []nats.Option{nats.SetCustomDialer(d), nats.TLSHandshakeFirst(), nats.Nkey(l.PublicKey, d.sign(l.Sign)), nats.IgnoreDiscoveredServers()}
}

// AsNode returns the options of a connection as the enrolled node id: pinned, the
// node's key signing the server's nonce bound to the session, replies on the node's
// own inbox. refused, when not nil, hears of every broker the pin check refuses
// (Login.Refused). The dials under way end when ctx does (Login.Context). The
// broker's certificate is checked by now (Login.Now).
func AsNode(ctx context.Context, id identity.Identity, kp *identity.KeyPair, now func() time.Time, refused func(error)) ([]nats.Option, error) {
	pin, err := PinOf(id)
	if err != nil {
		return nil, err
	}
	return append(Login{Pin: pin, PublicKey: id.PublicKey, Sign: kp.Sign, Refused: refused, Context: ctx, Now: now}.Options(),
		nats.CustomInboxPrefix(id.Subjects.InboxPrefix),
		nats.Name("meshhost "+id.Node),
	), nil
}

// URLs joins broker addresses (ip:port) into nats.go's server list.
func URLs(brokers []string) string { return strings.Join(URLList(brokers), ",") }

// URLList is the nats.go URL of each broker (ip:port).
func URLList(brokers []string) []string {
	urls := make([]string, 0, len(brokers))
	for _, b := range brokers {
		urls = append(urls, "tls://"+b)
	}
	return urls
}

// PinOf returns the identity's CA pin.
func PinOf(id identity.Identity) ([32]byte, error) {
	var pin [32]byte
	b, err := hex.DecodeString(id.CAPin)
	if err != nil || len(b) != 32 {
		return pin, errors.New("identity: ca_pin is not 64 hex digits")
	}
	copy(pin[:], b)
	return pin, nil
}

// BrokerError is what Login.Refused hears: the pin check of the broker at Broker
// (ip:port, as dialled) refused it, Err says why. An operator told "check what
// listens there" needs the address (a walkthrough: the agent's log had none).
type BrokerError struct {
	Broker string
	Err    error
}

func (e *BrokerError) Error() string { return e.Broker + ": " + e.Err.Error() }
func (e *BrokerError) Unwrap() error { return e.Err }

// IsSubstituted reports whether a connection failed because the broker's chain does
// not reach the pinned CA (nats.go wraps the handshake's error).
func IsSubstituted(err error) bool { return errors.Is(err, pintls.ErrSubstituted) }

// IsClock reports whether a connection failed because the broker's chain, which
// reaches the pinned CA, is not valid at this machine's time (pintls.ErrClock): the
// mesh, seen by a wrong clock, not a substitution.
func IsClock(err error) bool { return errors.Is(err, pintls.ErrClock) }

// IsAuthRefused reports whether the mesh (after the pin check, so the mesh itself)
// refused the connection's credentials.
func IsAuthRefused(err error) bool { return errors.Is(err, nats.ErrAuthorization) }
