package seal

import (
	"fmt"
	"io"
	"log/slog"
	"strconv"
)

// redacted stands in for a secret wherever a ControlIdentity is printed.
const redacted = "<redacted>"

// redactedIfSet is what a printed ControlIdentity shows for one of its secrets:
// "<redacted>" when it is set, nothing when it is not.
func redactedIfSet(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return redacted
}

// String describes the identity with its TLS key and its operator credentials
// "<redacted>" (the certificate, public, by its size). Its JSON is what Identity
// seals, and carries them: it is not changed.
func (id ControlIdentity) String() string {
	return fmt.Sprintf("ControlIdentity{CertPEM:(%d bytes) KeyPEM:%s Creds:%s}",
		len(id.CertPEM), redactedIfSet(id.KeyPEM), redactedIfSet(id.Creds))
}

// GoString is String, so that %#v does not print the secrets either.
func (id ControlIdentity) GoString() string { return "seal." + id.String() }

// Format implements fmt.Formatter so that every verb, not only %v and %s, prints
// the redacted form: without it %s, %x or %d would print the key and the creds,
// even of an identity held in another struct.
func (id ControlIdentity) Format(f fmt.State, verb rune) {
	var s string
	switch {
	case verb == 'v' && f.Flag('#'):
		s = id.GoString()
	case verb == 'v' || verb == 's':
		s = id.String()
	case verb == 'q':
		s = strconv.Quote(id.String())
	default:
		s = "%!" + string(verb) + "(seal.ControlIdentity=" + id.String() + ")"
	}
	io.WriteString(f, s)
}

// LogValue implements slog.LogValuer: the certificate's size, the secrets
// redacted. (slog's JSON handler would otherwise write its JSON, secrets
// included.)
func (id ControlIdentity) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Int("cert_pem_bytes", len(id.CertPEM)),
		slog.String("key_pem", redactedIfSet(id.KeyPEM)),
		slog.String("creds", redactedIfSet(id.Creds)),
	)
}
