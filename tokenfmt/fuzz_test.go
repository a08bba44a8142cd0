package tokenfmt

import (
	"errors"
	"testing"
	"time"
)

// FuzzParse checks, for any input, that Parse does not panic, that what it accepts is
// valid and encodes back to the trimmed input, and that its errors never carry the
// token's secret field.
func FuzzParse(f *testing.F) {
	for _, c := range loadGolden(f) {
		f.Add(c.Token, c.Now)
	}
	f.Fuzz(func(t *testing.T, s string, now int64) {
		tok, err := Parse(s, time.Unix(now, 0))
		var ee *ExpiredError
		switch {
		case err == nil, errors.As(err, &ee):
			if verr := tok.Validate(); verr != nil {
				t.Fatalf("Parse accepted a token that does not validate: %v", verr)
			}
			if enc := tok.Encode(); enc != Trim(s) {
				t.Fatalf("Encode(Parse(x)) = %q; want %q", enc, Trim(s))
			}
			if (err == nil) != time.Unix(now, 0).Before(tok.Expiry) {
				t.Fatalf("expiry %v against now %d gave error %v", tok.Expiry, now, err)
			}
		default:
			if tok.Mesh != "" || tok.Brokers != nil || tok.SigningKey != nil || tok.Secret != ([SecretSize]byte{}) {
				t.Fatalf("Parse returned a token with error %v", err)
			}
		}
		if err != nil {
			assertNoSecret(t, err.Error(), s)
		}
	})
}
