package identity

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"mesh/host/redact/redacttest"
	"strings"
	"testing"
)

// TestSecretsNeverPrinted (audit of secrets, finding 4): Identity and Pending
// redacted their seed under %v, %s, %q, %x and %#v only: they cannot be
// fmt.Formatter (their Format field takes the name), and %d printed every field,
// the seed included. Their seed is a Secret now. Each type that holds a seed,
// printed with any verb, logged with slog or marshalled to JSON, itself or held
// in another struct, shows no seed. A bare Secret's JSON is the seed, as the
// files hold it, so it is not marshalled here.
func TestSecretsNeverPrinted(t *testing.T) {
	id := validIdentity(t)
	id.Seed = redacttest.Marker
	p := validPending(t)
	p.Seed = redacttest.Marker
	kp := KeyPair{seed: []byte(redacttest.Marker), pub: "UPUBLIC", priv: []byte(redacttest.Marker)}
	for _, c := range []struct {
		name    string
		v       any
		jsonToo bool   // its JSON is not a file's
		public  string // shown all the same
	}{
		{"Identity", id, true, "web-1"},
		{"Pending", p, true, "web-1"},
		{"KeyPair", kp, true, "UPUBLIC"},
		{"Secret", Secret(redacttest.Marker), false, "redacted"},
	} {
		for name, out := range redacttest.Renderings(t, c.v, c.jsonToo) {
			for _, form := range redacttest.Forms() {
				if strings.Contains(out, form) {
					t.Errorf("%s %s: the output holds a seed (%q): %s", c.name, name, form, out)
				}
			}
			// %x and %X print an Identity's and a Pending's other fields in hex.
			if !strings.Contains(out, c.public) && !strings.Contains(strings.ToLower(out), hex.EncodeToString([]byte(c.public))) {
				t.Errorf("%s %s: the output does not show %q: %s", c.name, name, c.public, out)
			}
		}
	}
	// The files still hold the seed.
	for _, b := range [][]byte{fileBytes(t, id), must(json.Marshal(filePending(p)))} {
		if !bytes.Contains(b, []byte(`"nkey_seed": "`+redacttest.Marker+`"`)) && !bytes.Contains(b, []byte(`"nkey_seed":"`+redacttest.Marker+`"`)) {
			t.Errorf("the file form lost its seed: %s", b)
		}
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
