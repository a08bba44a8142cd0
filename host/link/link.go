// Package link is the host's connection to the mesh: the NATS options every
// connection a host opens shares, the one-shot ones of enrolment and the long-lived
// one of the run loop alike. Every connection is TLS with the handshake first (no
// byte of NATS in clear) and checks the broker's chain against the pinned CA inside
// the handshake, before any credential crosses.
package link

import (
	"crypto/tls"
	"encoding/hex"
	"errors"
	"strings"

	"github.com/nats-io/nats.go"

	"mesh/host/identity"
	"mesh/host/pintls"
)

// Pinned returns the options that make a connection reach only the mesh whose CA
// pin is given.
func Pinned(pin [32]byte) []nats.Option { return pinned(pin, nil) }

// pinned is Pinned that also tells refused, when it is not nil, of every broker the
// pin check refuses. nats.go returns that error from a first connection but reports
// a failed reconnection's handshake to no handler, so a long-lived connection learns
// of a substituted broker only here.
func pinned(pin [32]byte, refused func(error)) []nats.Option {
	cfg := pintls.Config(pin)
	if refused != nil {
		verify := cfg.VerifyConnection
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			err := verify(cs)
			if err != nil {
				refused(err)
			}
			return err
		}
	}
	return []nats.Option{nats.Secure(cfg), nats.TLSHandshakeFirst()}
}

// AsNode returns the options of a connection as the enrolled node id: pinned, the
// node's key signing the server's nonce, replies on the node's own inbox. refused,
// when not nil, hears of every broker the pin check refuses (see pinned).
func AsNode(id identity.Identity, kp *identity.KeyPair, refused func(error)) ([]nats.Option, error) {
	pin, err := PinOf(id)
	if err != nil {
		return nil, err
	}
	return append(pinned(pin, refused),
		nats.Nkey(id.PublicKey, kp.Sign),
		nats.CustomInboxPrefix(id.Subjects.InboxPrefix),
		nats.Name("meshhost "+id.Node),
	), nil
}

// URLs joins broker addresses (ip:port) into nats.go's server list.
func URLs(brokers []string) string {
	urls := make([]string, 0, len(brokers))
	for _, b := range brokers {
		urls = append(urls, "tls://"+b)
	}
	return strings.Join(urls, ",")
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

// IsSubstituted reports whether a connection failed because the broker's chain does
// not reach the pinned CA (nats.go wraps the handshake's error).
func IsSubstituted(err error) bool { return errors.Is(err, pintls.ErrSubstituted) }

// IsAuthRefused reports whether the mesh (after the pin check, so the mesh itself)
// refused the connection's credentials.
func IsAuthRefused(err error) bool { return errors.Is(err, nats.ErrAuthorization) }
