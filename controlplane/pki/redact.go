package pki

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strconv"
)

// redacted stands in for the key wherever a Leaf is printed.
const redacted = "<redacted>"

// redactedIfSet is what a printed Leaf shows for its key: "<redacted>" when it is
// set, nothing when it is not.
func redactedIfSet(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return redacted
}

// String describes the leaf with its key "<redacted>" and its certificate, which
// is public, by its size.
func (l Leaf) String() string {
	return fmt.Sprintf("Leaf{CertPEM:(%d bytes) KeyPEM:%s}", len(l.CertPEM), redactedIfSet(l.KeyPEM))
}

// GoString is String, so that %#v does not print the key either.
func (l Leaf) GoString() string { return "pki." + l.String() }

// Format implements fmt.Formatter so that every verb, not only %v and %s, prints
// the redacted form: without it %s, %x or %d would print the key, even of a leaf
// held in another struct.
func (l Leaf) Format(f fmt.State, verb rune) {
	var s string
	switch {
	case verb == 'v' && f.Flag('#'):
		s = l.GoString()
	case verb == 'v' || verb == 's':
		s = l.String()
	case verb == 'q':
		s = strconv.Quote(l.String())
	default:
		s = "%!" + string(verb) + "(pki.Leaf=" + l.String() + ")"
	}
	io.WriteString(f, s)
}

// LogValue implements slog.LogValuer: the certificate's size, the key redacted.
func (l Leaf) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Int("cert_pem_bytes", len(l.CertPEM)),
		slog.String("key_pem", redactedIfSet(l.KeyPEM)),
	)
}

// MarshalJSON writes the certificate and the key redacted: a Leaf has no JSON
// form of its own (its halves are written to files as PEM), and one in a JSON
// document or a JSON log must not carry its key there.
func (l Leaf) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		CertPEM string `json:"cert_pem"`
		KeyPEM  string `json:"key_pem"`
	}{string(l.CertPEM), redactedIfSet(l.KeyPEM)})
}
