package seal

import (
	"bytes"
	"encoding/json"
	"mesh/host/redact/redacttest"
	"strings"
	"testing"
)

// TestSecretsNeverPrinted (audit of secrets, finding 4): a ControlIdentity
// printed with any verb or logged with slog, itself or held in another struct,
// shows neither its TLS key nor its operator credentials. Its JSON is what
// Identity seals and keeps them, so JSON, and slog's JSON handler over a struct
// holding it, are not checked.
func TestSecretsNeverPrinted(t *testing.T) {
	for _, c := range []struct {
		name    string
		v       any
		jsonToo bool   // its JSON is not a wire form
		public  string // shown all the same
	}{
		{"ControlIdentity", ControlIdentity{CertPEM: []byte("-----BEGIN CERTIFICATE-----\n"), KeyPEM: []byte(redacttest.Marker), Creds: []byte(redacttest.Marker)}, false, "CertPEM:(28 bytes)"},
	} {
		for name, out := range redacttest.Renderings(t, c.v, c.jsonToo) {
			for _, form := range redacttest.Forms() {
				if strings.Contains(out, form) {
					t.Errorf("%s %s: the output holds a secret (%q): %s", c.name, name, form, out)
				}
			}
			if !strings.Contains(out, c.public) && !strings.HasPrefix(name, "slog") {
				t.Errorf("%s %s: the output does not show %q: %s", c.name, name, c.public, out)
			}
		}
	}
	// What Identity seals is unchanged: the secrets are there.
	type plain ControlIdentity
	id := ControlIdentity{CertPEM: []byte("cert"), KeyPEM: []byte(redacttest.Marker), Creds: []byte("creds")}
	got, err1 := json.Marshal(id)
	want, err2 := json.Marshal(plain(id))
	if err1 != nil || err2 != nil || !bytes.Equal(got, want) {
		t.Fatalf("the identity's JSON changed: %s, want %s", got, want)
	}
	var secret [32]byte
	secret[0] = 1
	blob, err := Identity(secret, "m", "n", id)
	if err != nil {
		t.Fatal(err)
	}
	back, err := OpenIdentity(secret, "m", "n", blob)
	if err != nil || string(back.KeyPEM) != redacttest.Marker {
		t.Fatalf("the sealed identity lost its key: %v", err)
	}
}
