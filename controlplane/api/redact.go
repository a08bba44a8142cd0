package api

import (
	"fmt"
	"log/slog"

	"mesh/host/redact"
)

// String describes the request with its Secret (an older client's token secret)
// "<redacted>". The request's JSON is its wire form and carries the secret: it is
// not changed.
func (r EnrolRequest) String() string {
	return fmt.Sprintf("EnrolRequest{V:%d Mesh:%q Node:%q Role:%q Secret:%s TokenID:%q TokenProof:%q PublicKey:%q KeyProof:%q CAPin:%q SigningKey:%q Agent:%q CurveKey:%q Rules:%d}",
		r.V, r.Mesh, r.Node, r.Role, redact.IfSet(r.Secret), r.TokenID, r.TokenProof, r.PublicKey, r.KeyProof,
		r.CAPin, r.SigningKey, r.Agent, r.CurveKey, r.Rules)
}

// GoString is String, so that %#v does not print the secret either.
func (r EnrolRequest) GoString() string { return "api." + r.String() }

// Format implements fmt.Formatter so that every verb, not only %v and %s, prints
// the redacted form: without it %d or %x would print the fields, the secret
// included, even of a request held in another struct.
func (r EnrolRequest) Format(f fmt.State, verb rune) {
	redact.Format(f, verb, "api.EnrolRequest", r.String(), r.GoString())
}

// LogValue implements slog.LogValuer: the request's fields, the secret redacted.
// (slog's JSON handler would otherwise write its JSON, secret included.)
func (r EnrolRequest) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Int("v", r.V),
		slog.String("mesh", r.Mesh),
		slog.String("node", r.Node),
		slog.String("role", r.Role),
		slog.String("secret", redact.IfSet(r.Secret)),
		slog.String("token_id", r.TokenID),
		slog.String("token_proof", r.TokenProof),
		slog.String("public_key", r.PublicKey),
		slog.String("key_proof", r.KeyProof),
		slog.String("ca_pin", r.CAPin),
		slog.String("signing_key", r.SigningKey),
		slog.String("agent", r.Agent),
		slog.String("curve_key", r.CurveKey),
		slog.Int("rules", r.Rules),
	)
}
