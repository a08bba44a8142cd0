package join

import (
	"fmt"
	"log/slog"

	"mesh/host/redact"
)

// String describes the pending join with its seeds "<redacted>". Its JSON is the
// pending file's layout, which keeps the seeds: it is not changed.
func (p pending) String() string {
	return fmt.Sprintf("pending{Node:%q TokenHash:%q NkeySeed:%s CurveSeed:%s}",
		p.Node, p.TokenHash, redact.IfSet(p.NkeySeed), redact.IfSet(p.CurveSeed))
}

// GoString is String, so that %#v does not print the seeds either.
func (p pending) GoString() string { return "join." + p.String() }

// Format implements fmt.Formatter so that every verb, not only %v and %s, prints
// the redacted form: without it any verb would print the seeds, even of a pending
// join held in another struct.
func (p pending) Format(f fmt.State, verb rune) {
	redact.Format(f, verb, "join.pending", p.String(), p.GoString())
}

// LogValue implements slog.LogValuer: the node and token, the seeds redacted.
// (slog's JSON handler would otherwise write the file's JSON, seeds included.)
func (p pending) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("node", p.Node),
		slog.String("token_hash", p.TokenHash),
		slog.String("nkey_seed", redact.IfSet(p.NkeySeed)),
		slog.String("curve_seed", redact.IfSet(p.CurveSeed)),
	)
}
