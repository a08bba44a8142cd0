package join

import (
	"fmt"
	"io"
	"log/slog"
	"strconv"
)

// redacted stands in for a seed wherever a pending join is printed.
const redacted = "<redacted>"

// redactedIfSet is what a printed pending join shows for one of its seeds:
// "<redacted>" when it is set, nothing when it is not.
func redactedIfSet(s string) string {
	if s == "" {
		return ""
	}
	return redacted
}

// String describes the pending join with its seeds "<redacted>". Its JSON is the
// pending file's layout, which keeps the seeds: it is not changed.
func (p pending) String() string {
	return fmt.Sprintf("pending{Node:%q TokenHash:%q NkeySeed:%s CurveSeed:%s}",
		p.Node, p.TokenHash, redactedIfSet(p.NkeySeed), redactedIfSet(p.CurveSeed))
}

// GoString is String, so that %#v does not print the seeds either.
func (p pending) GoString() string { return "join." + p.String() }

// Format implements fmt.Formatter so that every verb, not only %v and %s, prints
// the redacted form: without it any verb would print the seeds, even of a pending
// join held in another struct.
func (p pending) Format(f fmt.State, verb rune) {
	var s string
	switch {
	case verb == 'v' && f.Flag('#'):
		s = p.GoString()
	case verb == 'v' || verb == 's':
		s = p.String()
	case verb == 'q':
		s = strconv.Quote(p.String())
	default:
		s = "%!" + string(verb) + "(join.pending=" + p.String() + ")"
	}
	io.WriteString(f, s)
}

// LogValue implements slog.LogValuer: the node and token, the seeds redacted.
// (slog's JSON handler would otherwise write the file's JSON, seeds included.)
func (p pending) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("node", p.Node),
		slog.String("token_hash", p.TokenHash),
		slog.String("nkey_seed", redactedIfSet(p.NkeySeed)),
		slog.String("curve_seed", redactedIfSet(p.CurveSeed)),
	)
}
