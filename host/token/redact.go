package token

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"
)

const redactedSecret = "<redacted>"

// Validate reports the first field, in token order, that Parse would refuse, as a
// *FieldError. It does not look at the clock.
func (t Token) Validate() error {
	fault := func(i int, reason string) error { return &FieldError{Field: fieldName(i), Reason: reason} }
	if r := idFault("mesh", t.Mesh); r != "" {
		return fault(iMesh, r)
	}
	switch {
	case len(t.Brokers) == 0:
		return fault(iBrokers, "there is no broker address")
	case len(t.Brokers) > MaxBrokers:
		return fault(iBrokers, "there are "+strconv.Itoa(len(t.Brokers))+" broker addresses, more than "+strconv.Itoa(MaxBrokers))
	}
	for n, ap := range t.Brokers {
		if r := addrFault(ap); r != "" {
			return fault(iBrokers, "broker address "+strconv.Itoa(n+1)+" "+r)
		}
		for k := 0; k < n; k++ {
			if t.Brokers[k] == ap {
				return fault(iBrokers, "broker address "+strconv.Itoa(n+1)+" repeats broker address "+strconv.Itoa(k+1))
			}
		}
	}
	if t.CAPin == [32]byte{} {
		return fault(iCAPin, "the CA pin is all zeros: it was never set")
	}
	if len(t.SigningKey) != 32 {
		return fault(iSigningKey, "the signing key is "+strconv.Itoa(len(t.SigningKey))+" bytes; an Ed25519 public key is 32")
	}
	if strings.Count(string(t.SigningKey), "\x00") == 32 {
		return fault(iSigningKey, "the signing key is all zeros: it was never set")
	}
	if r := idFault("node", t.Node); r != "" {
		return fault(iNode, r)
	}
	if r := roleFault(t.Role); r != "" {
		return fault(iRole, r)
	}
	if sec := t.Expiry.Unix(); sec < 0 || sec > lastExpiry || t.Expiry.Nanosecond() != 0 {
		return fault(iExpiry, "the expiry must be whole seconds between 1970 and the year 9999")
	}
	if t.Secret == [SecretSize]byte{} {
		return fault(iSecret, "the secret is all zeros: it was never set")
	}
	return nil
}

// String shows the token's public fields in token order with "<redacted>" for the
// secret and no checksum (it is computed over the secret). It is not a token.
func (t Token) String() string {
	parts := []string{
		Prefix + strconv.Itoa(Version), t.Mesh, t.brokerList(),
		hex.EncodeToString(t.CAPin[:]), hex.EncodeToString(t.SigningKey),
		t.Node, string(t.Role), strconv.FormatInt(t.Expiry.Unix(), 10), redactedSecret,
	}
	return strings.Join(parts, "_")
}

func (t Token) brokerList() string {
	var b strings.Builder
	for i, ap := range t.Brokers {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(ap.String())
	}
	return b.String()
}

// GoString renders the token for %#v, secret redacted.
func (t Token) GoString() string {
	return fmt.Sprintf("token.Token{Mesh:%q, Brokers:%q, CAPin:%q, SigningKey:%q, Node:%q, Role:%q, Expiry:%q, Secret:%s}",
		t.Mesh, t.brokerList(), hex.EncodeToString(t.CAPin[:]), hex.EncodeToString(t.SigningKey),
		t.Node, string(t.Role), t.Expiry.UTC().Format(time.RFC3339), redactedSecret)
}

// Format implements fmt.Formatter, so that no verb (%x included) reaches the secret.
func (t Token) Format(f fmt.State, verb rune) {
	var s string
	switch {
	case verb == 'v' && f.Flag('#'):
		s = t.GoString()
	case verb == 'v' || verb == 's':
		s = t.String()
	case verb == 'q':
		s = strconv.Quote(t.String())
	default:
		s = "%!" + string(verb) + "(token.Token=" + t.String() + ")"
	}
	io.WriteString(f, s)
}

// LogValue implements slog.LogValuer with the public fields only.
func (t Token) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("mesh", t.Mesh),
		slog.String("node", t.Node),
		slog.String("role", string(t.Role)),
		slog.String("brokers", t.brokerList()),
		slog.Time("expiry", t.Expiry),
		slog.String("secret", redactedSecret),
	)
}

// MarshalJSON writes the public fields and a redacted secret.
func (t Token) MarshalJSON() ([]byte, error) {
	type public struct {
		Mesh       string   `json:"mesh"`
		Brokers    []string `json:"brokers"`
		CAPin      string   `json:"ca_pin"`
		SigningKey string   `json:"signing_key"`
		Node       string   `json:"node"`
		Role       string   `json:"role"`
		Expiry     int64    `json:"expiry"`
		Secret     string   `json:"secret"`
	}
	brokers := []string{}
	if len(t.Brokers) > 0 {
		brokers = strings.Split(t.brokerList(), ",")
	}
	return json.Marshal(public{t.Mesh, brokers, hex.EncodeToString(t.CAPin[:]), hex.EncodeToString(t.SigningKey),
		t.Node, string(t.Role), t.Expiry.Unix(), redactedSecret})
}

// IsRedacted reports whether s ends as a printed token ends (String: its secret
// replaced by <redacted>, no checksum) and holds that one token only: a token
// copied from a log or a listing, which admits nothing. A token starts with
// Prefix, its version and '_' where no id character comes before (an id may hold
// "mesh1" itself: a mesh named meshlab, a node mesh1-gw).
func IsRedacted(s string) bool {
	s = strings.TrimSpace(s)
	if !strings.HasSuffix(s, "_"+redactedSecret) {
		return false
	}
	head := Prefix + strconv.Itoa(Version) + "_"
	starts := 0
	for i := strings.Index(s, head); i >= 0; i = nextIndex(s, head, i) {
		if i == 0 || !idOrSeparator(s[i-1]) {
			starts++
		}
	}
	return starts == 1
}

// nextIndex is the index of sub in s after the one at i, or -1.
func nextIndex(s, sub string, i int) int {
	j := strings.Index(s[i+1:], sub)
	if j < 0 {
		return -1
	}
	return i + 1 + j
}

// idOrSeparator reports whether c may be part of a token's id, or the '_' between
// its fields.
func idOrSeparator(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}
