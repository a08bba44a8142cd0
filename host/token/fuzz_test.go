package token

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// FuzzParse: Parse never panics; what it accepts validates, and rebuilding the text
// from the parsed fields gives back the trimmed input; errors never quote the secret
// field.
func FuzzParse(f *testing.F) {
	for _, v := range vectors(f) {
		f.Add(v.Token, v.Now)
	}
	f.Fuzz(func(t *testing.T, s string, now int64) {
		tok, err := Parse(s, time.Unix(now, 0))
		var ee *ExpiredError
		if err == nil || errors.As(err, &ee) {
			if verr := tok.Validate(); verr != nil {
				t.Fatalf("accepted a token that does not validate: %v", verr)
			}
			// String is the token with the secret and checksum replaced; put the
			// secret back and compare with what was parsed.
			trimmed := Trim(s)
			rebuilt := strings.Replace(tok.String(), redactedSecret, tok.SecretHex(), 1)
			if i := strings.LastIndexByte(trimmed, '_'); i < 0 || rebuilt != trimmed[:i] {
				t.Fatalf("fields do not rebuild the input:\n got %q\nwant %q", rebuilt, trimmed)
			}
			if (err == nil) != time.Unix(now, 0).Before(tok.Expiry) {
				t.Fatalf("expiry %v at %d gave %v", tok.Expiry, now, err)
			}
		} else if tok.Mesh != "" || tok.Brokers != nil || tok.SigningKey != nil || tok.Secret != [SecretSize]byte{} {
			t.Fatalf("returned a token with error %v", err)
		}
		if err != nil {
			parts := strings.Split(Trim(s), "_")
			if len(parts) > 8 && len(parts[8]) >= 12 && strings.Contains(strings.ToLower(err.Error()), strings.ToLower(parts[8])) {
				t.Fatalf("error quotes the secret field: %v", err)
			}
		}
	})
}
