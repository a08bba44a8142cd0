package pki

import (
	"mesh/host/redact/redacttest"
	"strings"
	"testing"
)

// TestSecretsNeverPrinted (audit of secrets, finding 4): a Leaf printed with any
// verb, logged with slog or marshalled to JSON, itself or held in another struct,
// never shows its key.
func TestSecretsNeverPrinted(t *testing.T) {
	for _, c := range []struct {
		name    string
		v       any
		jsonToo bool // its JSON is not a wire form
	}{
		{"Leaf", Leaf{CertPEM: []byte("-----BEGIN CERTIFICATE-----\n"), KeyPEM: []byte(redacttest.Marker)}, true},
	} {
		for name, out := range redacttest.Renderings(t, c.v, c.jsonToo) {
			for _, form := range redacttest.Forms() {
				if strings.Contains(out, form) {
					t.Errorf("%s %s: the output holds a secret (%q): %s", c.name, name, form, out)
				}
			}
			if !strings.Contains(out, "redacted") {
				t.Errorf("%s %s: the output does not show the redaction: %s", c.name, name, out)
			}
		}
	}
}
