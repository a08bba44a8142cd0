package api

import (
	"encoding/json"
	"mesh/host/redact/redacttest"
	"strings"
	"testing"
)

// TestSecretsNeverPrinted (audit of secrets, finding 4): an EnrolRequest printed
// with any verb or logged with slog, itself or held in another struct, shows no
// token secret. Its JSON is its wire form and keeps the secret, so JSON, and
// slog's JSON handler over a struct holding it, are not checked.
func TestSecretsNeverPrinted(t *testing.T) {
	for _, c := range []struct {
		name    string
		v       any
		jsonToo bool   // its JSON is not a wire form
		public  string // shown all the same
	}{
		{"EnrolRequest", EnrolRequest{V: 2, Mesh: "demo", Node: "web-1", Role: "worker", Secret: redacttest.Marker,
			TokenID: "ab", TokenProof: "cHJvb2Y=", PublicKey: "UPUBLIC", KeyProof: "a2V5", CAPin: "cd", SigningKey: "ef",
			Agent: "meshhost/0.1.0", CurveKey: "XCURVE", Rules: 3}, false, "web-1"},
	} {
		for name, out := range redacttest.Renderings(t, c.v, c.jsonToo) {
			for _, form := range redacttest.Forms() {
				if strings.Contains(out, form) {
					t.Errorf("%s %s: the output holds a secret (%q): %s", c.name, name, form, out)
				}
			}
			if !strings.Contains(out, c.public) {
				t.Errorf("%s %s: the output does not show %q: %s", c.name, name, c.public, out)
			}
		}
	}
	// Its wire form is unchanged: the secret is there.
	b, err := json.Marshal(EnrolRequest{Secret: redacttest.Marker})
	if err != nil || !strings.Contains(string(b), `"secret":"`+redacttest.Marker+`"`) {
		t.Fatalf("the request's JSON lost its secret: %s %v", b, err)
	}
}
