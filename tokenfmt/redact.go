package tokenfmt

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
)

// redacted stands in for the secret wherever a Token is printed.
const redacted = "<redacted>"

// String returns the token's fields in token order with the secret replaced by
// "<redacted>" and without the checksum (which is computed over the secret). It is
// for logs and messages; it does not parse as a token.
func (t Token) String() string { return t.body(redacted) }

// GoString is for %#v: a Go-like rendering with the secret redacted.
func (t Token) GoString() string {
	var b strings.Builder
	b.WriteString("tokenfmt.Token{Mesh:")
	b.WriteString(strconv.Quote(t.Mesh))
	b.WriteString(", Brokers:[]netip.AddrPort{")
	for i, ap := range t.Brokers {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(ap.String()))
	}
	fmt.Fprintf(&b, "}, CAPin:%q, SigningKey:%q, Node:%q, Role:%q, Expiry:%q, Secret:%s}",
		hex.EncodeToString(t.CAPin[:]), hex.EncodeToString(t.SigningKey), t.Node, string(t.Role),
		t.Expiry.UTC().Format("2006-01-02T15:04:05Z07:00"), redacted)
	return b.String()
}

// Format implements fmt.Formatter so that every verb, not only %v and %s, prints the
// redacted form: without it %x would print the secret bytes.
func (t Token) Format(f fmt.State, verb rune) {
	switch verb {
	case 'v':
		if f.Flag('#') {
			io.WriteString(f, t.GoString())
			return
		}
		io.WriteString(f, t.String())
	case 's':
		io.WriteString(f, t.String())
	case 'q':
		io.WriteString(f, strconv.Quote(t.String()))
	default:
		fmt.Fprintf(f, "%%!%c(tokenfmt.Token=%s)", verb, t.String())
	}
}

// LogValue implements slog.LogValuer: a token logged with log/slog shows its public
// fields and a redacted secret.
func (t Token) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("mesh", t.Mesh),
		slog.String("brokers", strings.Join(brokerStrings(t.Brokers), ",")),
		slog.String("node", t.Node),
		slog.String("role", string(t.Role)),
		slog.Time("expiry", t.Expiry),
		slog.String("secret", redacted),
	)
}

// MarshalJSON writes the token's public fields and a redacted secret, so that a Token
// that ends up in a JSON document or a JSON log does not carry its secret there.
func (t Token) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Mesh       string   `json:"mesh"`
		Brokers    []string `json:"brokers"`
		CAPin      string   `json:"ca_pin"`
		SigningKey string   `json:"signing_key"`
		Node       string   `json:"node"`
		Role       string   `json:"role"`
		Expiry     int64    `json:"expiry"`
		Secret     string   `json:"secret"`
	}{t.Mesh, brokerStrings(t.Brokers), hex.EncodeToString(t.CAPin[:]), hex.EncodeToString(t.SigningKey),
		t.Node, string(t.Role), t.Expiry.Unix(), redacted})
}

func brokerStrings(list []netip.AddrPort) []string {
	s := make([]string, len(list))
	for i, ap := range list {
		s[i] = ap.String()
	}
	return s
}
