package identity

import (
	"fmt"
	"io"
	"log/slog"
	"strconv"
)

// redacted stands in for a seed wherever one is printed.
const redacted = "<redacted>"

// Secret is a seed kept in one of this package's files (Identity.Seed,
// Pending.Seed). It prints as "<redacted>" under every fmt verb, held in a struct
// or not, and in slog. Identity and Pending cannot implement fmt.Formatter (their
// Format field takes the method's name), so their seed is this type: without it a
// verb meant for numbers (%d, %o, %t) would print their fields, the seed included.
//
// Its JSON is the seed itself, as the files hold it: Save and SavePending write
// it, and Identity's and Pending's MarshalJSON leave it out. Convert it with
// string() only to use the seed.
type Secret string

// String is "<redacted>", or "" for no seed.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return redacted
}

// GoString is String: %#v must not print the seed either.
func (s Secret) GoString() string { return s.String() }

// Format implements fmt.Formatter, so that no verb (%x, %d included) reaches the
// seed.
func (s Secret) Format(f fmt.State, verb rune) {
	var out string
	switch verb {
	case 'v', 's':
		out = s.String()
	case 'q':
		out = strconv.Quote(s.String())
	default:
		out = "%!" + string(verb) + "(identity.Secret=" + s.String() + ")"
	}
	io.WriteString(f, out)
}

// LogValue keeps the seed out of slog.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }
