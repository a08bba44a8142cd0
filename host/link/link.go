// Package link is the host's connection to the mesh: the NATS options every
// connection a host opens shares, the one-shot ones of enrolment and the long-lived
// one of the run loop alike. Every connection is TLS with the handshake first (no
// byte of NATS in clear) and checks the broker's chain against the pinned CA inside
// the handshake, before any credential crosses.
package link

import (
	"encoding/hex"
	"errors"
	"strings"

	"github.com/nats-io/nats.go"

	"mesh/host/identity"
	"mesh/host/pintls"
)

// Pinned returns the options that make a connection reach only the mesh whose CA
// pin is given.
func Pinned(pin [32]byte) []nats.Option {
	return []nats.Option{nats.Secure(pintls.Config(pin)), nats.TLSHandshakeFirst()}
}

// AsNode returns the options of a connection as the enrolled node id: pinned, the
// node's key signing the server's nonce, replies on the node's own inbox.
func AsNode(id identity.Identity, kp *identity.KeyPair) ([]nats.Option, error) {
	pin, err := PinOf(id)
	if err != nil {
		return nil, err
	}
	return append(Pinned(pin),
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
