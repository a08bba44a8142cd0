package pki

import (
	"encoding/json"
	"fmt"
	"log/slog"

	"mesh/host/redact"
)

// String describes the leaf with its key "<redacted>" and its certificate, which
// is public, by its size.
func (l Leaf) String() string {
	return fmt.Sprintf("Leaf{CertPEM:(%d bytes) KeyPEM:%s}", len(l.CertPEM), redact.IfSet(l.KeyPEM))
}

// GoString is String, so that %#v does not print the key either.
func (l Leaf) GoString() string { return "pki." + l.String() }

// Format implements fmt.Formatter so that every verb, not only %v and %s, prints
// the redacted form: without it %s, %x or %d would print the key, even of a leaf
// held in another struct.
func (l Leaf) Format(f fmt.State, verb rune) {
	redact.Format(f, verb, "pki.Leaf", l.String(), l.GoString())
}

// LogValue implements slog.LogValuer: the certificate's size, the key redacted.
func (l Leaf) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Int("cert_pem_bytes", len(l.CertPEM)),
		slog.String("key_pem", redact.IfSet(l.KeyPEM)),
	)
}

// MarshalJSON writes the certificate and the key redacted: a Leaf has no JSON
// form of its own (its halves are written to files as PEM), and one in a JSON
// document or a JSON log must not carry its key there.
func (l Leaf) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		CertPEM string `json:"cert_pem"`
		KeyPEM  string `json:"key_pem"`
	}{string(l.CertPEM), redact.IfSet(l.KeyPEM)})
}
