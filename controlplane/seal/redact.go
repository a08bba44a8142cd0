package seal

import (
	"fmt"
	"log/slog"

	"mesh/host/redact"
)

// String describes the identity with its TLS key and its operator credentials
// "<redacted>" (the certificate, public, by its size). Its JSON is what Identity
// seals, and carries them: it is not changed.
func (id ControlIdentity) String() string {
	return fmt.Sprintf("ControlIdentity{CertPEM:(%d bytes) KeyPEM:%s Creds:%s}",
		len(id.CertPEM), redact.IfSet(id.KeyPEM), redact.IfSet(id.Creds))
}

// GoString is String, so that %#v does not print the secrets either.
func (id ControlIdentity) GoString() string { return "seal." + id.String() }

// Format implements fmt.Formatter so that every verb, not only %v and %s, prints
// the redacted form: without it %s, %x or %d would print the key and the creds,
// even of an identity held in another struct.
func (id ControlIdentity) Format(f fmt.State, verb rune) {
	redact.Format(f, verb, "seal.ControlIdentity", id.String(), id.GoString())
}

// LogValue implements slog.LogValuer: the certificate's size, the secrets
// redacted. (slog's JSON handler would otherwise write its JSON, secrets
// included.)
func (id ControlIdentity) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Int("cert_pem_bytes", len(id.CertPEM)),
		slog.String("key_pem", redact.IfSet(id.KeyPEM)),
		slog.String("creds", redact.IfSet(id.Creds)),
	)
}
